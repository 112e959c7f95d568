package ptx

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// hostUnit is how many elements of one op a worker of AssembleHost takes
// at a time; hostRow is the length of its scratch rows.
const (
	hostUnit = 1 << 16
	hostRow  = 1024
)

// AssembleHost executes ops on the CPU: the host twin of the assemble
// kernel, with the same results bit for bit. out is the batch tensor of
// layout l (l.Bytes() bytes, elements in host byte order); arena holds the
// decoded chunks the copy ops read. The ops must not overlap in the
// output (a Plan's ops do not when its boxes do not). Up to workers
// goroutines share the work (0 means GOMAXPROCS). Every op is validated
// first; on error nothing has been written.
func AssembleHost(out []byte, l Layout, arena []byte, ops []Op, workers int) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if int64(len(out)) != l.Bytes() {
		return fmt.Errorf("ptx: output of %d bytes for a layout of %d: %w", len(out), l.Bytes(), ErrInvalid)
	}
	prepared := make([]hostOp, len(ops))
	units := 0
	for i := range ops {
		if err := validateOp(&ops[i], i, &l, int64(len(arena))); err != nil {
			return err
		}
		prepared[i].prepare(&ops[i], &l, arena)
		units += int((prepared[i].elems + hostUnit - 1) / hostUnit)
	}
	// unitOps[u] is the op of unit u; unitStart[i] the first unit of op i.
	unitOps := make([]int32, 0, units)
	unitStart := make([]int, len(ops))
	for i := range prepared {
		unitStart[i] = len(unitOps)
		for range (prepared[i].elems + hostUnit - 1) / hostUnit {
			unitOps = append(unitOps, int32(i))
		}
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, units)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			raw := make([]uint64, hostRow)
			vals := make([]uint32, hostRow)
			halves := make([]uint16, hostRow)
			for {
				u := int(next.Add(1) - 1)
				if u >= units {
					return
				}
				h := &prepared[unitOps[u]]
				start := int64(u-unitStart[unitOps[u]]) * hostUnit
				h.run(out, l.Dtype, start, min(hostUnit, h.elems-start), raw, vals, halves)
			}
		})
	}
	wg.Wait()
	return nil
}

// hostOp is a validated op with the constants the kernel computes per block.
type hostOp struct {
	op      *Op
	rank    int
	elems   int64
	ostride [MaxRank]int64 // output element strides within a sample
	dst     int64          // output element index of the box's first element
	src     int64          // chunk element index of the box's first element
	chunk   []byte
	size    int64 // source item size
	// Blosc geometry of a shuffled source, as in the kernel's op_ctx.
	blockSize, typeSize int64
	lastBlock           int64
	nFull, nLast        int64
	whole               bool
}

func (h *hostOp) prepare(op *Op, l *Layout, arena []byte) {
	h.op = op
	h.rank = len(l.Shape)
	stride := int64(1)
	dst, src, elems := int64(0), int64(0), int64(1)
	for d := h.rank - 1; d >= 0; d-- {
		h.ostride[d] = stride
		dst += int64(op.DstStart[d]) * stride
		src += int64(op.SrcStart[d]) * int64(op.SrcStride[d])
		elems *= int64(op.Extent[d])
		stride *= int64(l.Shape[d])
	}
	h.dst = int64(op.Sample)*stride + dst
	h.src = src
	h.elems = elems
	if op.SrcDtype == 0 {
		return
	}
	h.size = int64(op.SrcDtype.Size())
	h.chunk = arena[op.SrcOffset : op.SrcOffset+srcBytes(op, h.rank)]
	if op.Shuffle != NoShuffle {
		h.blockSize, h.typeSize = int64(op.BlockSize), int64(op.TypeSize)
		nbytes := int64(op.NBytes)
		h.lastBlock = (nbytes - 1) / h.blockSize
		h.nFull = h.blockSize / h.typeSize
		h.nLast = (nbytes - h.lastBlock*h.blockSize) / h.typeSize
		h.whole = h.typeSize == h.size && h.blockSize%h.typeSize == 0
	}
}

// run writes elements [start, start+n) of the op's box, in the box's C
// order, a row segment at a time.
func (h *hostOp) run(out []byte, outType Dtype, start, n int64, raw []uint64, vals []uint32, halves []uint16) {
	op := h.op
	last := h.rank - 1
	var c [MaxRank]int64
	rem := start
	for d := last; d >= 0; d-- {
		c[d] = rem % int64(op.Extent[d])
		rem /= int64(op.Extent[d])
	}
	for n > 0 {
		seg := min(int64(op.Extent[last])-c[last], n, int64(len(vals)))
		dst := h.dst
		src := h.src
		for d := range h.rank {
			dst += c[d] * h.ostride[d]
			src += c[d] * int64(op.SrcStride[d])
		}
		if h.direct(out, outType, dst, src, seg) {
			n -= seg
			c[last] += seg
			for d := last; d > 0 && c[d] == int64(op.Extent[d]); d-- {
				c[d] = 0
				c[d-1]++
			}
			continue
		}
		v := vals[:seg]
		if op.SrcDtype == 0 {
			for i := range v {
				v[i] = op.Fill
			}
		} else {
			r := raw[:seg]
			h.fetch(r, src, int64(op.SrcStride[last]))
			if op.BigEndian {
				swapRow(r, h.size)
			}
			castRow(v, r, op.SrcDtype)
		}
		writeRow(out, outType, dst, v, halves)
		n -= seg
		c[last] += seg
		for d := last; d > 0 && c[d] == int64(op.Extent[d]); d-- {
			c[d] = 0
			c[d-1]++
		}
	}
}

// direct converts a row of seg elements from chunk element src to output
// element dst in one pass, for the common case of a row of unshuffled
// little-endian 8- or 16-bit integers in a row of the chunk; it reports
// false (and writes nothing) for every other case, which run's general
// path (fetch, cast, write) handles. The conversions are those of
// castRow and writeRow.
func (h *hostOp) direct(out []byte, outType Dtype, dst, src, seg int64) bool {
	op := h.op
	if op.Shuffle != NoShuffle || op.BigEndian || op.SrcStride[h.rank-1] != 1 || seg == 0 {
		return false
	}
	k, ok := rowKindOf(op.SrcDtype, outType)
	if !ok || (h.size > 1 && !littleEndianHost()) {
		return false
	}
	// The chunk's elements in place: aligned to their size (chunks start
	// 256-aligned), little-endian like the host. The bounds are checked
	// here, once per row.
	in, o := k.sizes()
	_ = h.chunk[int64(in)*(src+seg)-1]
	_ = out[int64(o)*(dst+seg)-1]
	convertRow(k, unsafe.Pointer(&out[int64(o)*dst]), unsafe.Pointer(&h.chunk[int64(in)*src]), int(seg))
	return true
}

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

// writeRow stores float32 bits v at output elements dst, dst+1, ... as
// outType, in host byte order (halves is scratch for bfloat16).
func writeRow(out []byte, outType Dtype, dst int64, v []uint32, halves []uint16) {
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
