package ptx

import (
	"encoding/binary"
	"math"
	"math/bits"
	"unsafe"
)

// littleEndianHost reports whether the host stores integers little-end
// first, as the chunks' elements are laid out.
func littleEndianHost() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// fetch reads the stored bytes of chunk elements e, e+step, ... into raw
// (byte j of an element in bits 8j..8j+7).
func (h *hostOp) fetch(raw []uint64, e, step int64) {
	chunk := h.chunk
	switch h.op.Shuffle {
	case ByteShuffle:
		if !h.whole {
			for i := range raw {
				raw[i] = h.byteShuffled(e)
				e += step
			}
			return
		}
		// Element e is unit i of block b; walk b and i along the row
		// instead of dividing for every element.
		b := e / h.nFull
		i := e - b*h.nFull
		for k := range raw {
			n := h.nFull
			if b == h.lastBlock {
				n = h.nLast
			}
			at := b*h.blockSize + i
			var v uint64
			for j := range h.size {
				v |= uint64(chunk[at+j*n]) << (8 * j)
			}
			raw[k] = v
			if i += step; i >= h.nFull {
				b += i / h.nFull
				i %= h.nFull
			}
		}
	case BitShuffle:
		for i := range raw {
			raw[i] = h.bitShuffled(e)
			e += step
		}
	default:
		switch h.size {
		case 1:
			for i := range raw {
				raw[i] = uint64(chunk[e])
				e += step
			}
		case 2:
			for i := range raw {
				raw[i] = uint64(binary.LittleEndian.Uint16(chunk[2*e:]))
				e += step
			}
		case 4:
			for i := range raw {
				raw[i] = uint64(binary.LittleEndian.Uint32(chunk[4*e:]))
				e += step
			}
		default:
			for i := range raw {
				raw[i] = binary.LittleEndian.Uint64(chunk[8*e:])
				e += step
			}
		}
	}
}

// plain returns the stored bytes of element e of an unshuffled chunk.
func (h *hostOp) plain(e int64) uint64 {
	var v uint64
	for j := range h.size {
		v |= uint64(h.chunk[e*h.size+j]) << (8 * j)
	}
	return v
}

// blockOf returns the blosc block holding unshuffled byte p, p's offset
// within it and the block's length in typesize units.
func (h *hostOp) blockOf(p int64) (b, o, n int64) {
	b = p / h.blockSize
	o = p - b*h.blockSize
	n = h.nFull
	if b == h.lastBlock {
		n = h.nLast
	}
	return b, o, n
}

// byteShuffled returns the stored bytes of element e of a byte-shuffled
// chunk whose items may straddle typesize units or blocks: within a block
// of n typesize units, byte k of unit i sits at k*n + i, and the block's
// trailing bytes stay in place. (fetch walks the common case, typesize =
// item size, without division.)
func (h *hostOp) byteShuffled(e int64) uint64 {
	var v uint64
	for j := range h.size {
		p := e*h.size + j
		b, o, n := h.blockOf(p)
		if o < n*h.typeSize {
			i, k := o/h.typeSize, o%h.typeSize
			p = b*h.blockSize + k*n + i
		}
		v |= uint64(h.chunk[p]) << (8 * j)
	}
	return v
}

// bitShuffled returns the stored bytes of element e of a bit-shuffled
// chunk. A block of n typesize units with n%8 == 0 holds 8*typesize rows
// of n/8 bytes; row 8k+bit holds bit `bit` of byte k of every unit, unit i
// at byte i/8, bit i%8. Other blocks, and a block's trailing bytes, are
// stored as they are.
func (h *hostOp) bitShuffled(e int64) uint64 {
	if h.whole {
		b := e / h.nFull
		i := e - b*h.nFull
		n := h.nFull
		if b == h.lastBlock {
			n = h.nLast
		}
		if n%8 != 0 {
			return h.plain(e)
		}
		row := n / 8
		at := b*h.blockSize + i/8
		var v uint64
		for j := range h.size {
			v |= uint64(bitGather(h.chunk, at+j*8*row, row, uint(i%8))) << (8 * j)
		}
		return v
	}
	var v uint64
	for j := range h.size {
		p := e*h.size + j
		b, o, n := h.blockOf(p)
		var x byte
		if n%8 != 0 || o >= n*h.typeSize {
			x = h.chunk[p]
		} else {
			i, k := o/h.typeSize, o%h.typeSize
			row := n / 8
			x = bitGather(h.chunk, b*h.blockSize+k*8*row+i/8, row, uint(i%8))
		}
		v |= uint64(x) << (8 * j)
	}
	return v
}

// bitGather assembles a byte from bit sh of chunk[at], chunk[at+row], ...,
// chunk[at+7*row] (bit 0 first).
func bitGather(chunk []byte, at, row int64, sh uint) byte {
	var x byte
	for bit := range int64(8) {
		x |= (chunk[at+bit*row] >> sh & 1) << bit
	}
	return x
}

func swapRow(raw []uint64, size int64) {
	switch size {
	case 2:
		for i, x := range raw {
			raw[i] = uint64(bits.ReverseBytes16(uint16(x)))
		}
	case 4:
		for i, x := range raw {
			raw[i] = uint64(bits.ReverseBytes32(uint32(x)))
		}
	case 8:
		for i, x := range raw {
			raw[i] = bits.ReverseBytes64(x)
		}
	}
}

// castRow converts value bits to float32 bits with Float32Bits, in a loop
// per type.
func castRow(v []uint32, raw []uint64, d Dtype) {
	v = v[:len(raw)]
	switch d {
	case Uint8, Uint16:
		for i, x := range raw {
			v[i] = math.Float32bits(float32(uint16(x)))
		}
	case Int16:
		for i, x := range raw {
			v[i] = math.Float32bits(float32(int16(x)))
		}
	case Float32:
		for i, x := range raw {
			v[i] = uint32(x)
		}
	default:
		for i, x := range raw {
			v[i] = Float32Bits(d, x)
		}
	}
}

// writeRow stores float32 bits v at output elements dst, dst+step, ... as
// outType, in host byte order (halves is scratch for bfloat16).
func writeRow(out []byte, outType Dtype, dst, step int64, v []uint32, halves []uint16) {
	if step != 1 {
		e := binary.NativeEndian
		for i, x := range v {
			at := dst + int64(i)*step
			if outType == BFloat16 {
				e.PutUint16(out[2*at:], BFloat16Bits(x))
			} else {
				e.PutUint32(out[4*at:], x)
			}
		}
		return
	}
	if outType == BFloat16 {
		h := halves[:len(v)]
		for i, x := range v {
			h[i] = BFloat16Bits(x)
		}
		copy(out[2*dst:], unsafe.Slice((*byte)(unsafe.Pointer(&h[0])), 2*len(h)))
		return
	}
	copy(out[4*dst:], unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

// writeInts stores the low size bytes of the integers v at output
// elements dst, dst+step, ..., in host byte order.
func writeInts(out []byte, size, dst, step int64, v []int64) {
	e := binary.NativeEndian
	for i, x := range v {
		at := dst + int64(i)*step
		switch size {
		case 1:
			out[at] = byte(x)
		case 2:
			e.PutUint16(out[2*at:], uint16(x))
		case 4:
			e.PutUint32(out[4*at:], uint32(x))
		default:
			e.PutUint64(out[8*at:], uint64(x))
		}
	}
}
