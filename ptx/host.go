package ptx

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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
// decoded chunks the copy ops read; transforms is the batch's transform
// table (Plan.Transforms: nil, or one per sample). The ops must not
// overlap in the output (a Plan's ops do not when its boxes do not). Up
// to workers goroutines share the work (0 means GOMAXPROCS). Every op and
// transform is validated first; on such an error nothing has been
// written. For an integer output, values that do not fit it are reported,
// after every op has run, as a *MisfitError (the elements they were
// written to hold unspecified values).
func AssembleHost(out []byte, l Layout, arena []byte, ops []Op, transforms []Transform, workers int) error {
	a, err := NewHostAssembly(out, l, arena, ops, transforms)
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
			var m MisfitStatus
			defer a.merge(&m)
			for {
				u := int(next.Add(1) - 1)
				if u >= units {
					return
				}
				h := &a.ops[unitOps[u]]
				start := int64(u-unitStart[unitOps[u]]) * hostUnit
				h.run(a.out, a.dtype, start, min(hostUnit, h.elems-start), sc, &m)
			}
		})
	}
	wg.Wait()
	st := a.Misfits()
	return st.Err(l)
}

// HostAssembly is AssembleHost taken apart, for a caller that runs the
// ops reading one chunk right after decoding it, while the chunk's bytes
// are still in the CPU's cache: NewHostAssembly validates and prepares
// every op, Run executes some of them on the calling goroutine, and
// Misfits reports the values that did not fit an integer output.
type HostAssembly struct {
	out        []byte
	dtype      Dtype
	ops        []hostOp
	transforms []Transform

	mu      sync.Mutex
	misfits MisfitStatus // of every Run so far
}

// NewHostAssembly validates ops and transforms (nil, or one per sample)
// against layout l, out and arena as AssembleHost does, and prepares them;
// nothing is written yet.
func NewHostAssembly(out []byte, l Layout, arena []byte, ops []Op, transforms []Transform) (*HostAssembly, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if int64(len(out)) != l.Bytes() {
		return nil, fmt.Errorf("ptx: output of %d bytes for a layout of %d: %w", len(out), l.Bytes(), ErrInvalid)
	}
	if len(transforms) != 0 && len(transforms) != l.Samples {
		return nil, fmt.Errorf("ptx: %d transforms for %d samples: %w", len(transforms), l.Samples, ErrInvalid)
	}
	a := &HostAssembly{out: out, dtype: l.Dtype, ops: make([]hostOp, len(ops)), transforms: append([]Transform(nil), transforms...)}
	for s := range a.transforms {
		if err := a.transforms[s].validate(s, &l); err != nil {
			return nil, err
		}
	}
	for i := range ops {
		if err := validateOp(&ops[i], i, &l, int64(len(arena))); err != nil {
			return nil, err
		}
		var tf *Transform
		if len(a.transforms) != 0 && !a.transforms[ops[i].Sample].isIdentity() {
			tf = &a.transforms[ops[i].Sample]
		}
		a.ops[i].prepare(&ops[i], &l, arena, tf)
	}
	return a, nil
}

// HostScratch is the scratch rows of one goroutine running ops.
type HostScratch struct {
	raw    []uint64
	vals   []uint32
	halves []uint16
	ints   []int64
}

// NewHostScratch returns scratch rows for HostAssembly.Run.
func NewHostScratch() *HostScratch {
	return &HostScratch{raw: make([]uint64, hostRow), vals: make([]uint32, hostRow),
		halves: make([]uint16, hostRow), ints: make([]int64, hostRow)}
}

// Run executes the ops whose indexes idx lists, whole, on the calling
// goroutine. With from non-nil, the ops read from instead of
// arena[base:base+len(from)], which must hold all the source bytes they
// read: a chunk decoded into a scratch buffer rather than into its arena
// region, or read where it lies. Goroutines may run disjoint sets of ops
// at once. Values that do not fit an integer output are not an error of
// Run: Misfits reports them once every op has run.
func (a *HostAssembly) Run(idx []int32, base int64, from []byte, sc *HostScratch) error {
	var m MisfitStatus
	defer a.merge(&m)
	var local hostOp
	for _, i := range idx {
		h, err := a.op(i, base, from, &local)
		if err != nil {
			return err
		}
		h.run(a.out, a.dtype, 0, h.elems, sc, &m)
	}
	return nil
}

// Elems returns the number of elements op i writes (0 for an index out of
// range): the elements RunPart divides.
func (a *HostAssembly) Elems(i int32) int64 {
	if i < 0 || int(i) >= len(a.ops) {
		return 0
	}
	return a.ops[i].elems
}

// SrcRange returns the elements of op i, numbered as RunPart numbers
// them, whose source lies in elements [lo, hi) of its chunk:
// [start, start+n). They are one range when the chunk is in C order, as
// the box's elements are numbered; ok is false for a chunk in another
// order, a fill op or an index out of range. A chunk decoded a range of
// it at a time can so have each range's elements assembled as soon as
// they are decoded.
func (a *HostAssembly) SrcRange(i int32, lo, hi int64) (start, n int64, ok bool) {
	if i < 0 || int(i) >= len(a.ops) {
		return 0, 0, false
	}
	h := &a.ops[i]
	if h.chunk == nil || !h.cOrder() {
		return 0, 0, false
	}
	start = h.below(lo)
	return start, max(h.below(hi)-start, 0), true
}

// cOrder reports whether the op's chunk strides are C order.
func (h *hostOp) cOrder() bool {
	st := int64(1)
	for d := h.rank - 1; d >= 0; d-- {
		if int64(h.op.SrcStride[d]) != st {
			return false
		}
		st *= int64(h.op.SrcShape[d])
	}
	return true
}

// below returns how many elements of the op's box lie before element x
// of its chunk (in C order; cOrder): a box element's chunk index is below
// x when, at the first axis where their coordinates differ, the box
// element's is smaller.
func (h *hostOp) below(x int64) int64 {
	op := h.op
	var count int64
	rest := h.elems
	for d := range h.rank {
		e, st := int64(op.Extent[d]), int64(op.SrcStride[d])
		if e == 0 {
			return 0
		}
		rest /= e
		c := x / st
		x -= c * st
		switch rel := c - int64(op.SrcStart[d]); {
		case rel < 0:
			return count
		case rel >= e:
			return count + e*rest
		default:
			count += rel * rest
		}
	}
	return count
}

// RunPart is Run of elements [start, start+n) of op i, in the C order of
// its box: the parts of an op write disjoint output elements, so
// goroutines may run disjoint parts of one op at once, and its parts
// together write what Run of the op does.
func (a *HostAssembly) RunPart(i int32, start, n int64, base int64, from []byte, sc *HostScratch) error {
	var local hostOp
	h, err := a.op(i, base, from, &local)
	if err != nil {
		return err
	}
	if start < 0 || n < 0 || start+n > h.elems {
		return fmt.Errorf("ptx: elements [%d, %d) of op %d of %d: %w", start, start+n, i, h.elems, ErrInvalid)
	}
	var m MisfitStatus
	defer a.merge(&m)
	h.run(a.out, a.dtype, start, n, sc, &m)
	return nil
}

// op returns op i, or, when from is non-nil, a copy of it in *local that
// reads from instead of arena[base:base+len(from)] (see Run).
func (a *HostAssembly) op(i int32, base int64, from []byte, local *hostOp) (*hostOp, error) {
	if i < 0 || int(i) >= len(a.ops) {
		return nil, fmt.Errorf("ptx: op %d of %d: %w", i, len(a.ops), ErrInvalid)
	}
	h := &a.ops[i]
	if from == nil || h.chunk == nil {
		return h, nil
	}
	at := h.op.SrcOffset - base
	if at < 0 || at+int64(len(h.chunk)) > int64(len(from)) {
		return nil, fmt.Errorf("ptx: op %d reads arena bytes [%d, %d), outside the %d bytes at %d it was given: %w",
			i, h.op.SrcOffset, h.op.SrcOffset+int64(len(h.chunk)), len(from), base, ErrInvalid)
	}
	*local = *h
	local.chunk = from[at : at+int64(len(h.chunk))]
	return local, nil
}

// Misfits returns the status of the values that did not fit an integer
// output in the ops run so far: once every op has run, what the kernel
// reports for the same ops, field for field (see MisfitStatus.Err).
func (a *HostAssembly) Misfits() MisfitStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.misfits
}

func (a *HostAssembly) merge(m *MisfitStatus) {
	if m.Count == 0 {
		return
	}
	a.mu.Lock()
	a.misfits.merge(m)
	a.mu.Unlock()
}

// hostOp is a validated op with the constants the kernel computes per block.
type hostOp struct {
	op    *Op
	rank  int
	elems int64
	// ostride holds the output element strides within a sample per axis
	// of the box: C-order strides, permuted and negated by a transform.
	ostride [MaxRank]int64
	sample  int64 // output element index of the sample's first element
	dst     int64 // output element index of the box's first element
	src     int64 // chunk element index of the box's first element
	chunk   []byte
	size    int64 // source item size
	// Blosc geometry of a shuffled source, as in the kernel's op_ctx.
	blockSize, typeSize int64
	lastBlock           int64
	nFull, nLast        int64
	whole               bool
	// row is the typed row loop of an unshuffled source in host byte
	// order (see rowFuncOf), or nil for the generic path.
	row rowFunc
	// intensity is the sample's transform when it has an intensity map.
	intensity *Transform
	// The output's item size. An integer output: its range, and whether
	// values need the misfit check.
	outSize int64
	integer bool
	lo, hi  int64
	check   bool
}

func (h *hostOp) prepare(op *Op, l *Layout, arena []byte, tf *Transform) {
	h.op = op
	h.rank = len(l.Shape)
	// Output axis d of stride `stride` reads box axis a, backwards when
	// flipped (from the far end: base).
	stride, base := int64(1), int64(0)
	src, elems := int64(0), int64(1)
	for d := h.rank - 1; d >= 0; d-- {
		a, flip := d, false
		if tf != nil {
			a, flip = int(tf.Perm[d]), tf.Flips>>d&1 != 0
		}
		h.ostride[a] = stride
		if flip {
			h.ostride[a] = -stride
			base += int64(l.Shape[d]-1) * stride
		}
		src += int64(op.SrcStart[d]) * int64(op.SrcStride[d])
		elems *= int64(op.Extent[d])
		stride *= int64(l.Shape[d])
	}
	dst := base
	for d := range h.rank {
		dst += int64(op.DstStart[d]) * h.ostride[d]
	}
	h.sample = int64(op.Sample) * stride
	h.dst = h.sample + dst
	h.src = src
	h.elems = elems
	if tf != nil && tf.Intensity {
		h.intensity = tf
	}
	h.outSize = int64(l.Dtype.Size())
	if l.Dtype.IsInteger() {
		h.integer = true
		h.lo, h.hi = intRange(l.Dtype)
		h.check = NeedsCheck(op.SrcDtype, l.Dtype)
	}
	if op.SrcDtype == 0 {
		return
	}
	h.size = int64(op.SrcDtype.Size())
	h.chunk = arena[op.SrcOffset : op.SrcOffset+srcBytes(op, h.rank)]
	if op.Shuffle == NoShuffle && !op.BigEndian && (h.size == 1 || littleEndianHost()) {
		h.row = rowFuncOf(op.SrcDtype, l.Dtype)
	}
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
// order, a row segment at a time, and notes the values that do not fit
// an integer output in m.
func (h *hostOp) run(out []byte, outType Dtype, start, n int64, sc *HostScratch, m *MisfitStatus) {
	op := h.op
	raw, vals, halves := sc.raw, sc.vals, sc.halves
	last := h.rank - 1
	var c [MaxRank]int64
	rem := start
	for d := last; d >= 0; d-- {
		c[d] = rem % int64(op.Extent[d])
		rem /= int64(op.Extent[d])
	}
	if h.row != nil {
		h.runRows(out, &c, n, sc, m)
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
		r := raw[:seg]
		if op.SrcDtype != 0 {
			h.fetch(r, src, int64(op.SrcStride[last]))
			if op.BigEndian {
				swapRow(r, h.size)
			}
		}
		if h.integer {
			h.intRow(out, dst, r, sc.ints[:seg], m)
		} else {
			v := vals[:seg]
			if op.SrcDtype == 0 {
				for i := range v {
					v[i] = op.Fill
				}
			} else {
				castRow(v, r, op.SrcDtype)
			}
			if h.intensity != nil {
				for i, x := range v {
					v[i] = h.intensity.mapBits(x)
				}
			}
			writeRow(out, outType, dst, h.ostride[last], v, halves)
		}
		n -= seg
		c[last] += seg
		for d := last; d > 0 && c[d] == int64(op.Extent[d]); d-- {
			c[d] = 0
			c[d-1]++
		}
	}
}

// intRow writes a row segment of an integer output from output element
// dst on: the fill, or the fetched value bits raw converted (ints is
// scratch), noting misfits in m.
func (h *hostOp) intRow(out []byte, dst int64, raw []uint64, ints []int64, m *MisfitStatus) {
	op := h.op
	step := h.ostride[h.rank-1]
	if op.SrcDtype == 0 {
		x := fillInt(op.Fill)
		for i := range ints {
			ints[i] = x
		}
	} else {
		for i, v := range raw {
			x, ok := intValue(op.SrcDtype, v)
			if h.check && (!ok || x < h.lo || x > h.hi) {
				m.note(op.Sample, dst+int64(i)*step-h.sample, op.SrcDtype, v)
			}
			ints[i] = x
		}
	}
	writeInts(out, h.outSize, dst, step, ints)
}
