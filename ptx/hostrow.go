package ptx

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// A rowBlock is the work of one call of a row loop: rows rows of n
// elements, element i of row r read from s + r*sr + i*ss and written to
// d + r*dr + i*ds (byte offsets; the output's may be negative, after a
// flip). Every element lies inside the chunk and the output.
type rowBlock struct {
	d, s           unsafe.Pointer
	n, rows        int
	ds, ss, dr, sr int
	big            bool // the output it is part of is streamOutBytes or more
}

// streamOutBytes is the least output (a batch's tensor) whose blocks the
// row loops may write past the caches however small each block is: its
// lines leave the caches long before anything reads them.
const streamOutBytes = 32 << 20

// A rowFunc is the typed row loop of an op whose source is unshuffled and
// in host byte order, chosen once per op (rowFuncOf): it converts the
// elements of b as the generic path (fetch, castRow, the intensity map,
// writeRow; or intRow) does each, bit for bit. For an integer output it
// returns false when some element does not fit the output (only where
// h.check), having written the same bits the generic path writes; the
// caller then notes the misfits.
type rowFunc func(h *hostOp, b rowBlock) bool

type (
	// hostInt is an integer source type of the row loops; hostNum adds
	// float32.
	hostInt interface {
		uint8 | uint16 | int16 | uint32 | int32
	}
	hostNum interface{ hostInt | float32 }
	// outInt is an integer output type.
	outInt interface {
		int8 | int16 | int32 | int64 | uint8 | uint16 | uint32
	}
)

// rowFuncOf returns the row loop of source type src into output type out,
// or nil where there is none: the sources are 8-, 16- and 32-bit integers
// (not bool) and float32; integer outputs take only the integer sources.
// The row kinds (8- and 16-bit integers into floats) have a vector loop
// where the CPU allows (vectorRow).
func rowFuncOf(src, out Dtype) rowFunc {
	switch src {
	case Uint8:
		return vectorRow(src, out, numRow[uint8](out))
	case Uint16:
		return vectorRow(src, out, numRow[uint16](out))
	case Int16:
		return vectorRow(src, out, numRow[int16](out))
	case Uint32:
		return numRow[uint32](out)
	case Int32:
		return numRow[int32](out)
	case Float32:
		return floatRow[float32](out)
	}
	return nil
}

// numRow returns the portable row loop of integer source type S into out.
func numRow[S hostInt](out Dtype) rowFunc {
	switch out {
	case Int8:
		return toInt[S, int8]
	case Int16:
		return toInt[S, int16]
	case Int32:
		return toInt[S, int32]
	case Int64:
		return toInt[S, int64]
	case Uint8:
		return toInt[S, uint8]
	case Uint16:
		return toInt[S, uint16]
	case Uint32:
		return toInt[S, uint32]
	}
	return floatRow[S](out)
}

// floatRow returns the portable row loop of source type S into the float
// output type out, or nil for another output type.
func floatRow[S hostNum](out Dtype) rowFunc {
	switch out {
	case Float32:
		return toFloat32[S]
	case BFloat16:
		return toBFloat16[S]
	}
	return nil
}

// The row loops below keep the block's fields in locals and step the
// offsets by addition: the compiler would otherwise reload the fields
// after every store through an unsafe pointer.

// toFloat32 is the row loop into float32: the value converted, then
// through the op's intensity map if it has one. A float32 source's bits
// pass through unchanged (a NaN keeps its payload) without a map.
func toFloat32[S hostNum](h *hostOp, b rowBlock) bool {
	n, ds, ss := b.n, b.ds, b.ss
	for r := range b.rows {
		d, s := unsafe.Add(b.d, r*b.dr), unsafe.Add(b.s, r*b.sr)
		if t := h.intensity; t != nil {
			scale, offset, lo, hi := t.Scale, t.Offset, t.Lo, t.Hi
			for i, si, di := 0, 0, 0; i < n; i, si, di = i+1, si+ss, di+ds {
				x := float32(*(*S)(unsafe.Add(s, si)))
				*(*uint32)(unsafe.Add(d, di)) = mapValue(x, scale, offset, lo, hi)
			}
			continue
		}
		for i, si, di := 0, 0, 0; i < n; i, si, di = i+1, si+ss, di+ds {
			*(*float32)(unsafe.Add(d, di)) = float32(*(*S)(unsafe.Add(s, si)))
		}
	}
	return true
}

// toBFloat16 is the row loop into bfloat16: toFloat32's float32 rounded
// by BFloat16Bits.
func toBFloat16[S hostNum](h *hostOp, b rowBlock) bool {
	n, ds, ss := b.n, b.ds, b.ss
	for r := range b.rows {
		d, s := unsafe.Add(b.d, r*b.dr), unsafe.Add(b.s, r*b.sr)
		if t := h.intensity; t != nil {
			scale, offset, lo, hi := t.Scale, t.Offset, t.Lo, t.Hi
			for i, si, di := 0, 0, 0; i < n; i, si, di = i+1, si+ss, di+ds {
				x := float32(*(*S)(unsafe.Add(s, si)))
				*(*uint16)(unsafe.Add(d, di)) = BFloat16Bits(mapValue(x, scale, offset, lo, hi))
			}
			continue
		}
		for i, si, di := 0, 0, 0; i < n; i, si, di = i+1, si+ss, di+ds {
			x := float32(*(*S)(unsafe.Add(s, si)))
			*(*uint16)(unsafe.Add(d, di)) = BFloat16Bits(math.Float32bits(x))
		}
	}
	return true
}

// toInt is the row loop of integer source type S into integer output type
// O: the value's low bytes, as writeInts stores them; where the op needs
// the check, it reports whether every value lies in h.lo..h.hi. Where
// every value of S fits O and they have the same size, the bits are the
// same: a row read and written forwards is a copy, and one of bytes
// written backwards is reversed eight at a time.
func toInt[S hostInt, O outInt](h *hostOp, b rowBlock) bool {
	n, ds, ss := b.n, b.ds, b.ss
	if !h.check {
		size := int(unsafe.Sizeof(O(0)))
		same := size == int(unsafe.Sizeof(S(0)))
		for r := range b.rows {
			d, s := unsafe.Add(b.d, r*b.dr), unsafe.Add(b.s, r*b.sr)
			switch {
			case same && ss == size && ds == size:
				copy(unsafe.Slice((*byte)(d), n*size), unsafe.Slice((*byte)(s), n*size))
			case same && size == 1 && ss == 1 && ds == -1:
				reverseBytes(d, s, n)
			default:
				for i, si, di := 0, 0, 0; i < n; i, si, di = i+1, si+ss, di+ds {
					*(*O)(unsafe.Add(d, di)) = O(*(*S)(unsafe.Add(s, si)))
				}
			}
		}
		return true
	}
	// An output's range lo..hi holds a power of two of values, so x fits
	// when x-lo has no bit above those of hi-lo: the loop ORs them all.
	lo, span := h.lo, uint64(h.hi-h.lo)
	var or uint64
	for r := range b.rows {
		d, s := unsafe.Add(b.d, r*b.dr), unsafe.Add(b.s, r*b.sr)
		for i, si, di := 0, 0, 0; i < n; i, si, di = i+1, si+ss, di+ds {
			x := int64(*(*S)(unsafe.Add(s, si)))
			or |= uint64(x - lo)
			*(*O)(unsafe.Add(d, di)) = O(x)
		}
	}
	return or&^span == 0
}

// reverseBytes writes the n bytes at s to d, d-1, ..., d-n+1.
func reverseBytes(d, s unsafe.Pointer, n int) {
	i := 0
	for ; i+8 <= n; i += 8 {
		v := binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(s, i)), 8))
		binary.BigEndian.PutUint64(unsafe.Slice((*byte)(unsafe.Add(d, -i-7)), 8), v)
	}
	for ; i < n; i++ {
		*(*byte)(unsafe.Add(d, -i)) = *(*byte)(unsafe.Add(s, i))
	}
}

// runRows writes n elements of an op with a row loop from box coordinates
// c on: the rest of the current row (along the box's last axis), or, from
// a row's start, whole rows up to the end of the next dimension, in one
// call of the row loop; the offsets move with the coordinates rather than
// being recomputed per row. A block with a value that does not fit the
// integer output runs again through the generic path, which notes its
// misfits in m.
func (h *hostOp) runRows(out []byte, c *[MaxRank]int64, n int64, sc *HostScratch, m *MisfitStatus) {
	op := h.op
	last := h.rank - 1
	dst, src := h.dst, h.src
	for d := range h.rank {
		dst += c[d] * h.ostride[d]
		src += c[d] * int64(op.SrcStride[d])
	}
	isz, osz := h.size, h.outSize
	ds, ss := h.ostride[last], int64(op.SrcStride[last])
	ext := int64(op.Extent[last])
	for n > 0 {
		d, seg, rows := last, min(ext-c[last], n), int64(1)
		step := seg
		var dr, sr int64
		if c[last] == 0 && last > 0 && n >= ext {
			d = last - 1
			rows = min(n/ext, int64(op.Extent[d])-c[d])
			step = rows
			dr, sr = h.ostride[d], int64(op.SrcStride[d])
		}
		// The slices span the block, from its lowest element to its
		// highest (a transform may order the output backwards), which
		// checks its bounds. The chunk's elements are read in place:
		// aligned to their size (chunks start 256-aligned).
		lo, hi := dst, dst
		for _, off := range [2]int64{(rows - 1) * dr, (seg - 1) * ds} {
			if off < 0 {
				lo += off
			} else {
				hi += off
			}
		}
		o := out[osz*lo : osz*(hi+1)]
		s := h.chunk[isz*src : isz*(src+(rows-1)*sr+(seg-1)*ss+1)]
		b := rowBlock{
			d: unsafe.Add(unsafe.Pointer(unsafe.SliceData(o)), osz*(dst-lo)), s: unsafe.Pointer(unsafe.SliceData(s)),
			n: int(seg), rows: int(rows), ds: int(osz * ds), ss: int(isz * ss), dr: int(osz * dr), sr: int(isz * sr),
			big: len(out) >= streamOutBytes,
		}
		if !h.row(h, b) {
			for r := range rows {
				h.misfitRow(out, dst+r*dr, src+r*sr, seg, sc, m)
			}
		}
		n -= rows * seg
		c[d] += step
		dst += step * h.ostride[d]
		src += step * int64(op.SrcStride[d])
		for ; d > 0 && c[d] == int64(op.Extent[d]); d-- {
			dst += h.ostride[d-1] - c[d]*h.ostride[d]
			src += int64(op.SrcStride[d-1]) - c[d]*int64(op.SrcStride[d])
			c[d] = 0
			c[d-1]++
		}
	}
}

// misfitRow runs the n elements of a row from output element dst and
// chunk element src on through the generic path (fetch and intRow),
// which writes what the row loop wrote and notes the misfits in m.
func (h *hostOp) misfitRow(out []byte, dst, src, n int64, sc *HostScratch, m *MisfitStatus) {
	ds, ss := h.ostride[h.rank-1], int64(h.op.SrcStride[h.rank-1])
	for k := int64(0); k < n; {
		seg := min(int64(len(sc.raw)), n-k)
		r := sc.raw[:seg]
		h.fetch(r, src+k*ss, ss)
		h.intRow(out, dst+k*ds, r, sc.ints[:seg], m)
		k += seg
	}
}
