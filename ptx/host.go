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
	a, err := NewHostAssembly(out, l, arena, ops)
	if err != nil {
		return err
	}
	units := 0
	for i := range a.ops {
		units += int((a.ops[i].elems + hostUnit - 1) / hostUnit)
	}
	// unitOps[u] is the op of unit u; unitStart[i] the first unit of op i.
	unitOps := make([]int32, 0, units)
	unitStart := make([]int, len(ops))
	for i := range a.ops {
		unitStart[i] = len(unitOps)
		for range (a.ops[i].elems + hostUnit - 1) / hostUnit {
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
			sc := NewHostScratch()
			for {
				u := int(next.Add(1) - 1)
				if u >= units {
					return
				}
				h := &a.ops[unitOps[u]]
				start := int64(u-unitStart[unitOps[u]]) * hostUnit
				h.run(a.out, a.dtype, start, min(hostUnit, h.elems-start), sc)
			}
		})
	}
	wg.Wait()
	return nil
}

// HostAssembly is AssembleHost taken apart, for a caller that runs the
// ops reading one chunk right after decoding it, while the chunk's bytes
// are still in the CPU's cache: NewHostAssembly validates and prepares
// every op, Run executes some of them on the calling goroutine.
type HostAssembly struct {
	out   []byte
	dtype Dtype
	ops   []hostOp
}

// NewHostAssembly validates ops against layout l, out and arena as
// AssembleHost does, and prepares them; nothing is written yet.
func NewHostAssembly(out []byte, l Layout, arena []byte, ops []Op) (*HostAssembly, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if int64(len(out)) != l.Bytes() {
		return nil, fmt.Errorf("ptx: output of %d bytes for a layout of %d: %w", len(out), l.Bytes(), ErrInvalid)
	}
	a := &HostAssembly{out: out, dtype: l.Dtype, ops: make([]hostOp, len(ops))}
	for i := range ops {
		if err := validateOp(&ops[i], i, &l, int64(len(arena))); err != nil {
			return nil, err
		}
		a.ops[i].prepare(&ops[i], &l, arena)
	}
	return a, nil
}

// HostScratch is the scratch rows of one goroutine running ops.
type HostScratch struct {
	raw    []uint64
	vals   []uint32
	halves []uint16
}

// NewHostScratch returns scratch rows for HostAssembly.Run.
func NewHostScratch() *HostScratch {
	return &HostScratch{raw: make([]uint64, hostRow), vals: make([]uint32, hostRow), halves: make([]uint16, hostRow)}
}

// Run executes the ops whose indexes idx lists, whole, on the calling
// goroutine. With from non-nil, the ops read from instead of
// arena[base:base+len(from)], which must hold all the source bytes they
// read: a chunk decoded into a scratch buffer rather than into its arena
// region. Goroutines may run disjoint sets of ops at once.
func (a *HostAssembly) Run(idx []int32, base int64, from []byte, sc *HostScratch) error {
	for _, i := range idx {
		if i < 0 || int(i) >= len(a.ops) {
			return fmt.Errorf("ptx: op %d of %d: %w", i, len(a.ops), ErrInvalid)
		}
		h := &a.ops[i]
		if from != nil && h.chunk != nil {
			at := h.op.SrcOffset - base
			if at < 0 || at+int64(len(h.chunk)) > int64(len(from)) {
				return fmt.Errorf("ptx: op %d reads arena bytes [%d, %d), outside the %d bytes at %d it was given: %w",
					i, h.op.SrcOffset, h.op.SrcOffset+int64(len(h.chunk)), len(from), base, ErrInvalid)
			}
			local := *h
			local.chunk = from[at : at+int64(len(h.chunk))]
			h = &local
		}
		h.run(a.out, a.dtype, 0, h.elems, sc)
	}
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
	// direct: rows of unshuffled little-endian 8- or 16-bit integers,
	// contiguous in the chunk, converted in one pass as row kind kind.
	direct bool
	kind   rowKind
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
	h.kind, h.direct = rowKindOf(op.SrcDtype, l.Dtype)
	h.direct = h.direct && op.Shuffle == NoShuffle && !op.BigEndian && op.SrcStride[h.rank-1] == 1 &&
		(h.size == 1 || littleEndianHost())
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
func (h *hostOp) run(out []byte, outType Dtype, start, n int64, sc *HostScratch) {
	op := h.op
	raw, vals, halves := sc.raw, sc.vals, sc.halves
	last := h.rank - 1
	var c [MaxRank]int64
	rem := start
	for d := last; d >= 0; d-- {
		c[d] = rem % int64(op.Extent[d])
		rem /= int64(op.Extent[d])
	}
	if h.direct {
		h.runDirect(out, &c, n)
		return
	}
	for n > 0 {
		seg := min(int64(op.Extent[last])-c[last], n, int64(len(vals)))
		dst := h.dst
		src := h.src
		for d := range h.rank {
			dst += c[d] * h.ostride[d]
			src += c[d] * int64(op.SrcStride[d])
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

// runDirect writes n elements of a direct op from box coordinates c on,
// in passes of convertRows; the offsets move with the coordinates rather
// than being recomputed per row.
func (h *hostOp) runDirect(out []byte, c *[MaxRank]int64, n int64) {
	op := h.op
	last := h.rank - 1
	dst, src := h.dst, h.src
	for d := range h.rank {
		dst += c[d] * h.ostride[d]
		src += c[d] * int64(op.SrcStride[d])
	}
	in, o := h.kind.sizes()
	isz, osz := int64(in), int64(o)
	ext := int64(op.Extent[last])
	for n > 0 {
		// The rest of the current row; or, from a row's start, whole rows
		// up to the end of the next dimension, in one call. The slices
		// span the block, from its first row's start to its last row's
		// end, which checks its bounds. The chunk's elements are read in
		// place: aligned to their size (chunks start 256-aligned).
		d, seg, rows := last, min(ext-c[last], n), int64(1)
		step := seg
		var ds, ss int64
		if c[last] == 0 && last > 0 && n >= ext {
			d = last - 1
			rows = min(n/ext, int64(op.Extent[d])-c[d])
			step = rows
			ds, ss = h.ostride[d], int64(op.SrcStride[d])
		}
		convertRows(h.kind, unsafe.Pointer(unsafe.SliceData(out[osz*dst:osz*(dst+(rows-1)*ds+seg)])),
			unsafe.Pointer(unsafe.SliceData(h.chunk[isz*src:isz*(src+(rows-1)*ss+seg)])),
			int(seg), int(rows), int(osz*ds), int(isz*ss))
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
