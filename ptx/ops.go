package ptx

import (
	"errors"
	"fmt"
	"math"
	"structs"
	"unsafe"
)

// MaxRank is the highest sample rank the kernels support.
const MaxRank = 8

// ElemsPerBlock is how many elements of one op a block of the assemble
// kernel writes; Plan gives each op ceil(elements/ElemsPerBlock) blocks.
const ElemsPerBlock = assembleThreads * assembleElemsPerThread * assembleGroups

const (
	assembleThreads        = 256  // DAMACY_ASSEMBLE_THREADS
	assembleElemsPerThread = 4    // DAMACY_ASSEMBLE_ELEMS_PER_THREAD
	assembleGroups         = 8    // DAMACY_ASSEMBLE_GROUPS
	statusThreads          = 1024 // DAMACY_STATUS_THREADS
	lz4CheckThreads        = 128  // DAMACY_LZ4_CHECK_THREADS
	bloscLZThreads         = 128  // DAMACY_BLOSCLZ_THREADS

	// maxOpElems bounds one op's box so that the kernel's 32-bit element
	// indices and fast divisions (valid below 2^31) hold; Plan splits
	// larger boxes.
	maxOpElems = 1 << 30
	// maxBloscBytes is blosc1's largest chunk (BLOSC_MAX_BUFFERSIZE).
	maxBloscBytes = math.MaxInt32 - 16
)

// ErrInvalid is wrapped by every error about an argument the kernels
// cannot execute: a malformed Layout, op, source or launch argument.
var ErrInvalid = errors.New("ptx: invalid argument")

// An OpError reports an op that cannot be executed: which op, which field
// and why. It wraps ErrInvalid.
type OpError struct {
	Op    int    // index of the op in its slice, or -1 for an op being added to a Plan
	Field string // the Op or Source field at fault
	Msg   string
}

func (e *OpError) Error() string {
	if e.Op < 0 {
		return fmt.Sprintf("ptx: op: %s: %s", e.Field, e.Msg)
	}
	return fmt.Sprintf("ptx: op %d: %s: %s", e.Op, e.Field, e.Msg)
}

// Unwrap returns ErrInvalid.
func (e *OpError) Unwrap() error { return ErrInvalid }

// A Layout describes a batch tensor: Samples samples of Shape each, C
// order, elements of type Dtype in host byte order: Float32 or BFloat16,
// or an integer type other than Uint64 for labels (see IntBits).
type Layout struct {
	Samples int
	Shape   []int // rank 1..MaxRank, every extent >= 1, fewer than 2^32 elements
	Dtype   Dtype
}

// Validate reports whether the kernels can write l.
func (l Layout) Validate() error {
	if !l.Dtype.IsOutput() {
		return fmt.Errorf("ptx: layout: output dtype %v is not float32, bfloat16 or an integer type other than uint64: %w", l.Dtype, ErrInvalid)
	}
	if len(l.Shape) < 1 || len(l.Shape) > MaxRank {
		return fmt.Errorf("ptx: layout: rank %d is outside 1..%d: %w", len(l.Shape), MaxRank, ErrInvalid)
	}
	n := int64(1)
	for d, x := range l.Shape {
		if x < 1 || int64(x) > math.MaxUint32 {
			return fmt.Errorf("ptx: layout: shape[%d] = %d is outside 1..2^32-1: %w", d, x, ErrInvalid)
		}
		n *= int64(x)
		if n > math.MaxUint32 {
			return fmt.Errorf("ptx: layout: a sample of shape %v has 2^32 or more elements: %w", l.Shape, ErrInvalid)
		}
	}
	if l.Samples < 1 || int64(l.Samples) > math.MaxUint32 {
		return fmt.Errorf("ptx: layout: %d samples is outside 1..2^32-1: %w", l.Samples, ErrInvalid)
	}
	if n > math.MaxInt64/int64(l.Samples)/int64(l.Dtype.Size()) {
		return fmt.Errorf("ptx: layout: %d samples of %v overflow int64 bytes: %w", l.Samples, l.Shape, ErrInvalid)
	}
	return nil
}

// SampleElems returns the number of elements in one sample.
func (l Layout) SampleElems() int64 {
	n := int64(1)
	for _, x := range l.Shape {
		n *= int64(x)
	}
	return n
}

// Bytes returns the size of the batch tensor in bytes.
func (l Layout) Bytes() int64 {
	return int64(l.Samples) * l.SampleElems() * int64(l.Dtype.Size())
}

// An Op is one copy or fill op of the assemble kernel, laid out exactly as
// kernels.h's struct damacy_op. Coordinates are in elements; fields of
// dimensions at or beyond the rank are zero. A fill op has SrcDtype 0 and
// zero source fields. Build ops with a Plan, which validates them and
// assigns FirstBlock.
type Op struct {
	_ structs.HostLayout
	// SrcOffset is the arena byte offset of the source chunk's first
	// decoded byte, a multiple of the source item size.
	SrcOffset int64
	// Sample is the destination sample.
	Sample uint32
	// FirstBlock is the op's first block in the Plan's block table.
	FirstBlock uint32
	// DstStart and Extent are the op's box within the sample.
	DstStart [MaxRank]uint32
	Extent   [MaxRank]uint32
	// SrcStart is the box's start within the chunk, SrcShape the chunk's
	// shape and SrcStride its element strides, per logical dimension.
	SrcStart  [MaxRank]uint32
	SrcShape  [MaxRank]uint32
	SrcStride [MaxRank]uint32
	// NBytes and BlockSize are the blosc geometry of a shuffled chunk: its
	// decoded size and its block size. Zero when not shuffled.
	NBytes    uint32
	BlockSize uint32
	// Fill is the fill value (fill ops only): float32 bits for a float
	// output; for an integer output the value's low 32 bits, which an
	// Int64 output sign-extends, so that an Int64 output's fills lie in
	// the int32 range. FillFor converts an array's fill value.
	Fill uint32
	// SrcDtype is the source type, or 0 for a fill op.
	SrcDtype Dtype
	// Shuffle is the chunk's blosc shuffle, TypeSize its blosc typesize
	// (zero when not shuffled).
	Shuffle  Shuffle
	TypeSize uint8
	// BigEndian is set when multi-byte elements are stored big endian.
	BigEndian bool
}

// OpBytes returns the bytes of ops as the kernel reads them (a view, not
// a copy), for copying into pinned or device memory.
func OpBytes(ops []Op) []byte {
	if len(ops) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&ops[0])), len(ops)*int(unsafe.Sizeof(Op{})))
}

// BlockOpBytes returns the bytes of a block table (Plan.BlockOps) as the
// kernel reads it (a view, not a copy).
func BlockOpBytes(table []uint32) []byte {
	if len(table) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&table[0])), 4*len(table))
}

// A Source is a decoded chunk in the arena, as a copy op reads it.
type Source struct {
	// Offset is the byte offset of the chunk's first decoded byte in the
	// arena; a multiple of Dtype.Size().
	Offset int64
	// Dtype is the stored element type, BigEndian its byte order.
	Dtype     Dtype
	BigEndian bool
	// Shape is the chunk's shape in the array's (logical) axis order; it
	// has fewer than 2^32 elements.
	Shape []int
	// Strides are the chunk's element strides per logical dimension: nil
	// means C order; see CStrides, FStrides and TransposeStrides. Every
	// element of Shape must map inside the chunk.
	Strides []int
	// Shuffle is the blosc shuffle the chunk's bytes are still in, with its
	// blosc typesize and blocksize (from the blosc header). The decoded
	// blosc chunk is Shape's elements times Dtype.Size() bytes.
	Shuffle   Shuffle
	TypeSize  int
	BlockSize int
}

// Bytes returns how many arena bytes the chunk occupies.
func (s *Source) Bytes() int64 {
	n := int64(s.Dtype.Size())
	for _, x := range s.Shape {
		n *= int64(x)
	}
	return n
}

// CStrides returns the element strides of a C-ordered (row-major) array of
// the given shape.
func CStrides(shape []int) []int {
	s := make([]int, len(shape))
	n := 1
	for d := len(shape) - 1; d >= 0; d-- {
		s[d] = n
		n *= shape[d]
	}
	return s
}

// FStrides returns the element strides of an F-ordered (column-major) array
// of the given shape, as zarr v2 writes with order "F".
func FStrides(shape []int) []int {
	s := make([]int, len(shape))
	n := 1
	for d := range shape {
		s[d] = n
		n *= shape[d]
	}
	return s
}

// TransposeStrides returns the strides, per logical dimension of shape, of
// a chunk stored through zarr's transpose codec with the given order: the
// stored array has shape[order[i]] as its i-th extent, in C order.
// FStrides(shape) equals TransposeStrides(shape, [n-1, ..., 0]).
func TransposeStrides(shape, order []int) ([]int, error) {
	if len(order) != len(shape) {
		return nil, fmt.Errorf("ptx: transpose order %v does not match rank %d: %w", order, len(shape), ErrInvalid)
	}
	seen := make([]bool, len(order))
	for _, o := range order {
		if o < 0 || o >= len(order) || seen[o] {
			return nil, fmt.Errorf("ptx: transpose order %v is not a permutation: %w", order, ErrInvalid)
		}
		seen[o] = true
	}
	stored := make([]int, len(shape))
	for i, o := range order {
		stored[i] = shape[o]
	}
	cs := CStrides(stored)
	s := make([]int, len(shape))
	for i, o := range order {
		s[o] = cs[i]
	}
	return s, nil
}

// A Plan is the assemble work of one wave: its ops, in launch order, and
// the block table that maps every block of the launch to its op. The
// kernel and AssembleHost execute the same ops. A Plan is reusable (Reset)
// and not safe for concurrent use.
type Plan struct {
	layout     Layout
	ops        []Op
	blockOps   []uint32
	transforms []Transform // one per sample, or none while every one is the identity
	srcEnd     int64
	maxOpElems int64
	needsCheck bool // some copy op's source type needs the misfit check
}

// NewPlan returns an empty plan for a batch of the given layout.
func NewPlan(l Layout) (*Plan, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	l.Shape = append([]int(nil), l.Shape...)
	return &Plan{layout: l, maxOpElems: maxOpElems}, nil
}

// Layout returns the batch layout the plan writes.
func (p *Plan) Layout() Layout {
	l := p.layout
	l.Shape = append([]int(nil), l.Shape...)
	return l
}

// Ops returns the plan's ops (the plan's own slice, valid until the next
// change to the plan; do not modify it).
func (p *Plan) Ops() []Op { return p.ops }

// BlockOps returns the block table: for each block of the launch, the
// index of its op (the plan's own slice, valid until the next change; do
// not modify it).
func (p *Plan) BlockOps() []uint32 { return p.blockOps }

// Blocks returns the number of blocks of the plan's launch.
func (p *Plan) Blocks() int { return len(p.blockOps) }

// SourceEnd returns the end of the highest arena byte any op reads: the
// arena must be at least this long.
func (p *Plan) SourceEnd() int64 { return p.srcEnd }

// NeedsCheck reports whether some copy op of the plan reads a source type
// whose values may not fit the integer output type (see NeedsCheck): its
// launch must then be given a MisfitStatus.
func (p *Plan) NeedsCheck() bool { return p.needsCheck }

// Reset empties the plan, its transforms included, keeping its layout and
// its memory.
func (p *Plan) Reset() {
	p.ops = p.ops[:0]
	p.blockOps = p.blockOps[:0]
	p.transforms = p.transforms[:0]
	p.srcEnd = 0
	p.needsCheck = false
}

// Fill adds a fill op: the box at start with the given extents in sample
// gets the value fill, in Op.Fill's encoding: float32 bits (see
// Float32Bits) for a float output; for an integer output, a value of the
// output type's range as its low 32 bits (see FillFor), or an error. A box
// with a zero extent adds nothing. On error the plan is unchanged.
func (p *Plan) Fill(sample int, start, extent []int, fill uint32) error {
	var op Op
	if err := p.setBox(&op, sample, start, extent); err != nil {
		return err
	}
	if !fillFits(p.layout.Dtype, fill) {
		return &OpError{-1, "Fill", fmt.Sprintf("fill %#x is not a %v", fill, p.layout.Dtype)}
	}
	op.Fill = fill
	return p.push(op)
}

// Copy adds a copy op: the box at start with the given extents in sample
// gets the same-shaped box at srcStart of the source chunk. A box with a
// zero extent adds nothing. On error the plan is unchanged.
func (p *Plan) Copy(sample int, start, extent []int, src *Source, srcStart []int) error {
	var op Op
	if err := p.setBox(&op, sample, start, extent); err != nil {
		return err
	}
	if err := setSource(&op, src, srcStart, len(p.layout.Shape)); err != nil {
		return err
	}
	if err := validateSource(&op, len(p.layout.Shape), -1); err != nil {
		return err
	}
	if err := p.push(op); err != nil {
		return err
	}
	p.srcEnd = max(p.srcEnd, src.Offset+src.Bytes())
	p.needsCheck = p.needsCheck || NeedsCheck(src.Dtype, p.layout.Dtype)
	return nil
}

// push adds op, undoing the addition if the launch would exceed the
// grid's 2^31-1 blocks.
func (p *Plan) push(op Op) error {
	nops, nblocks := len(p.ops), len(p.blockOps)
	p.add(op)
	if len(p.blockOps) > math.MaxInt32 {
		p.ops, p.blockOps = p.ops[:nops], p.blockOps[:nblocks]
		return &OpError{-1, "Extent", "the plan exceeds 2^31-1 blocks"}
	}
	return nil
}

func (p *Plan) setBox(op *Op, sample int, start, extent []int) error {
	rank := len(p.layout.Shape)
	if len(start) != rank || len(extent) != rank {
		return &OpError{-1, "Extent", fmt.Sprintf("box of rank %d/%d in a batch of rank %d", len(start), len(extent), rank)}
	}
	if sample < 0 || sample >= p.layout.Samples {
		return &OpError{-1, "Sample", fmt.Sprintf("sample %d of %d", sample, p.layout.Samples)}
	}
	op.Sample = uint32(sample)
	for d := range rank {
		if start[d] < 0 || extent[d] < 0 || start[d] > p.layout.Shape[d]-extent[d] {
			return &OpError{-1, "Extent", fmt.Sprintf("box [%d, %d+%d) in dimension %d outside the sample's %d", start[d], start[d], extent[d], d, p.layout.Shape[d])}
		}
		op.DstStart[d] = uint32(start[d])
		op.Extent[d] = uint32(extent[d])
	}
	return nil
}

func setSource(op *Op, src *Source, srcStart []int, rank int) error {
	if !src.Dtype.IsSource() {
		return &OpError{-1, "Dtype", fmt.Sprintf("%v is not a source type", src.Dtype)}
	}
	if len(src.Shape) != rank || len(srcStart) != rank || (src.Strides != nil && len(src.Strides) != rank) {
		return &OpError{-1, "Shape", fmt.Sprintf("source of rank %d (start %d, strides %d) in a batch of rank %d", len(src.Shape), len(srcStart), len(src.Strides), rank)}
	}
	strides := src.Strides
	if strides == nil {
		strides = CStrides(src.Shape)
	}
	for d := range rank {
		if src.Shape[d] < 1 || int64(src.Shape[d]) > math.MaxUint32 {
			return &OpError{-1, "Shape", fmt.Sprintf("chunk extent %d in dimension %d", src.Shape[d], d)}
		}
		if strides[d] < 0 || int64(strides[d]) > math.MaxUint32 {
			return &OpError{-1, "Strides", fmt.Sprintf("stride %d in dimension %d", strides[d], d)}
		}
		if srcStart[d] < 0 || srcStart[d] > src.Shape[d]-int(op.Extent[d]) {
			return &OpError{-1, "Shape", fmt.Sprintf("source box [%d, %d+%d) in dimension %d outside the chunk's %d", srcStart[d], srcStart[d], op.Extent[d], d, src.Shape[d])}
		}
		op.SrcStart[d] = uint32(srcStart[d])
		op.SrcShape[d] = uint32(src.Shape[d])
		op.SrcStride[d] = uint32(strides[d])
	}
	if src.TypeSize < 0 || src.TypeSize > math.MaxUint8 || src.BlockSize < 0 || int64(src.BlockSize) > math.MaxUint32 {
		return &OpError{-1, "TypeSize", fmt.Sprintf("blosc typesize %d, blocksize %d", src.TypeSize, src.BlockSize)}
	}
	op.SrcOffset = src.Offset
	op.SrcDtype = src.Dtype
	op.BigEndian = src.BigEndian
	op.Shuffle = src.Shuffle
	if src.Shuffle != NoShuffle {
		n := src.Bytes()
		if n > maxBloscBytes {
			return &OpError{-1, "Shape", fmt.Sprintf("a shuffled chunk of %d bytes exceeds blosc's limit", n)}
		}
		op.NBytes = uint32(n)
		op.BlockSize = uint32(src.BlockSize)
		op.TypeSize = uint8(src.TypeSize)
	}
	return nil
}

// add appends op, split along its outer dimensions into boxes of at most
// p.maxOpElems elements, and the blocks of each piece.
func (p *Plan) add(op Op) {
	rank := len(p.layout.Shape)
	n := int64(1)
	for d := range rank {
		n *= int64(op.Extent[d])
	}
	if n == 0 {
		return
	}
	if n <= p.maxOpElems {
		op.FirstBlock = uint32(len(p.blockOps))
		index := uint32(len(p.ops))
		p.ops = append(p.ops, op)
		for range (n + ElemsPerBlock - 1) / ElemsPerBlock {
			p.blockOps = append(p.blockOps, index)
		}
		return
	}
	// Split the outermost dimension that is longer than 1 into slabs that
	// fit (or into single slices, which are split further).
	d := 0
	for op.Extent[d] == 1 {
		d++
	}
	inner := n / int64(op.Extent[d])
	step := max(1, p.maxOpElems/inner)
	extent := int64(op.Extent[d])
	for at := int64(0); at < extent; at += step {
		piece := op
		piece.Extent[d] = uint32(min(step, extent-at))
		piece.DstStart[d] += uint32(at)
		if op.SrcDtype != 0 {
			piece.SrcStart[d] += uint32(at)
		}
		p.add(piece)
	}
}

// validateOp reports whether op (at index i) can be executed for layout l
// over an arena of arenaLen bytes.
func validateOp(op *Op, i int, l *Layout, arenaLen int64) error {
	rank := len(l.Shape)
	if int64(op.Sample) >= int64(l.Samples) {
		return &OpError{i, "Sample", fmt.Sprintf("sample %d of %d", op.Sample, l.Samples)}
	}
	n := int64(1)
	for d := range MaxRank {
		if d >= rank {
			if op.DstStart[d] != 0 || op.Extent[d] != 0 || op.SrcStart[d] != 0 || op.SrcShape[d] != 0 || op.SrcStride[d] != 0 {
				return &OpError{i, "Extent", fmt.Sprintf("dimension %d beyond rank %d is not zero", d, rank)}
			}
			continue
		}
		if op.Extent[d] < 1 || int64(op.DstStart[d])+int64(op.Extent[d]) > int64(l.Shape[d]) {
			return &OpError{i, "Extent", fmt.Sprintf("box [%d, %d+%d) in dimension %d outside the sample's %d", op.DstStart[d], op.DstStart[d], op.Extent[d], d, l.Shape[d])}
		}
		n *= int64(op.Extent[d])
	}
	if n > maxOpElems {
		return &OpError{i, "Extent", fmt.Sprintf("box of %d elements exceeds %d", n, maxOpElems)}
	}
	if op.SrcDtype == 0 {
		if op.SrcOffset != 0 || op.SrcStart != [MaxRank]uint32{} || op.SrcShape != [MaxRank]uint32{} || op.SrcStride != [MaxRank]uint32{} ||
			op.NBytes != 0 || op.BlockSize != 0 || op.Shuffle != NoShuffle || op.TypeSize != 0 || op.BigEndian {
			return &OpError{i, "SrcDtype", "fill op with source fields set"}
		}
		if !fillFits(l.Dtype, op.Fill) {
			return &OpError{i, "Fill", fmt.Sprintf("fill %#x is not a %v", op.Fill, l.Dtype)}
		}
		return nil
	}
	if op.Fill != 0 {
		return &OpError{i, "Fill", "copy op with a fill value"}
	}
	if err := validateSource(op, rank, i); err != nil {
		return err
	}
	if end := op.SrcOffset + srcBytes(op, rank); end > arenaLen {
		return &OpError{i, "SrcOffset", fmt.Sprintf("chunk [%d, %d) beyond the arena's %d bytes", op.SrcOffset, end, arenaLen)}
	}
	return nil
}

// srcBytes returns the bytes of op's source chunk.
func srcBytes(op *Op, rank int) int64 {
	n := int64(op.SrcDtype.Size())
	for d := range rank {
		n *= int64(op.SrcShape[d])
	}
	return n
}

// validateSource checks a copy op's source fields: the box within the
// chunk, every chunk element inside the chunk's bytes, alignment and the
// blosc geometry.
func validateSource(op *Op, rank, i int) error {
	if !op.SrcDtype.IsSource() {
		return &OpError{i, "SrcDtype", fmt.Sprintf("%v is not a source type", op.SrcDtype)}
	}
	size := int64(op.SrcDtype.Size())
	if op.SrcOffset < 0 || op.SrcOffset%size != 0 {
		return &OpError{i, "SrcOffset", fmt.Sprintf("offset %d is not a non-negative multiple of the %v item size", op.SrcOffset, op.SrcDtype)}
	}
	elems := uint64(1)
	for d := range rank {
		if op.SrcShape[d] < 1 || uint64(op.SrcStart[d])+uint64(op.Extent[d]) > uint64(op.SrcShape[d]) {
			return &OpError{i, "SrcShape", fmt.Sprintf("source box [%d, %d+%d) in dimension %d outside the chunk's %d", op.SrcStart[d], op.SrcStart[d], op.Extent[d], d, op.SrcShape[d])}
		}
		elems *= uint64(op.SrcShape[d])
		if elems > math.MaxUint32+1 {
			return &OpError{i, "SrcShape", "chunk of more than 2^32 elements"}
		}
	}
	// The last element of the chunk's logical space must lie inside it.
	last := uint64(0)
	for d := range rank {
		last += uint64(op.SrcShape[d]-1) * uint64(op.SrcStride[d])
		if last >= elems {
			return &OpError{i, "SrcStride", fmt.Sprintf("strides %v map shape %v beyond the chunk's %d elements", op.SrcStride[:rank], op.SrcShape[:rank], elems)}
		}
	}
	switch op.Shuffle {
	case NoShuffle:
		if op.NBytes != 0 || op.BlockSize != 0 || op.TypeSize != 0 {
			return &OpError{i, "Shuffle", "blosc geometry set on an unshuffled chunk"}
		}
	case ByteShuffle, BitShuffle:
		if uint64(op.NBytes) != elems*uint64(size) || op.NBytes > maxBloscBytes {
			return &OpError{i, "NBytes", fmt.Sprintf("blosc nbytes %d for a chunk of %d bytes", op.NBytes, elems*uint64(size))}
		}
		if op.BlockSize < 1 || op.BlockSize > maxBloscBytes || op.TypeSize < 1 {
			return &OpError{i, "BlockSize", fmt.Sprintf("blosc blocksize %d, typesize %d", op.BlockSize, op.TypeSize)}
		}
	default:
		return &OpError{i, "Shuffle", fmt.Sprintf("unknown shuffle %v", op.Shuffle)}
	}
	return nil
}
