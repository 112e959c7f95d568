package ptx

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"structs"

	"github.com/damacy-go/damacy/cuda"
)

// The generated PTX of assemble.cu, status.cu and blosclz.cu (see
// mkptx.sh).
var (
	//go:embed zassemble.ptx
	assemblePTX string
	//go:embed zstatus.ptx
	statusPTX string
	//go:embed zblosclz.ptx
	bloscLZPTX string
)

// Kernels are the project's kernels, loaded into one context: the
// embedded PTX JIT-compiled for its device, with every function resolved.
// Load it once per context and share it; its methods only queue work, and
// may be called from any thread on which that context is current.
type Kernels struct {
	assembleModule cuda.Module
	statusModule   cuda.Module
	bloscLZModule  cuda.Module
	assemble       cuda.Function
	reduceStatus   cuda.Function
	lz4Check       cuda.Function
	bloscLZ        cuda.Function
}

// Load JIT-compiles the embedded PTX into the current context (the driver
// caches the result on disk) and resolves the kernels. The calling thread
// must have the context current, as inside cuda.Executor.Do.
func Load() (*Kernels, error) {
	return load([]byte(assemblePTX), []byte(statusPTX), []byte(bloscLZPTX))
}

func load(assemble, status, blosclz []byte) (*Kernels, error) {
	k := new(Kernels)
	var err error
	if k.assembleModule, err = cuda.LoadModule(assemble); err != nil {
		return nil, fmt.Errorf("ptx: load zassemble.ptx: %w", err)
	}
	if k.statusModule, err = cuda.LoadModule(status); err != nil {
		k.Unload()
		return nil, fmt.Errorf("ptx: load zstatus.ptx: %w", err)
	}
	if k.bloscLZModule, err = cuda.LoadModule(blosclz); err != nil {
		k.Unload()
		return nil, fmt.Errorf("ptx: load zblosclz.ptx: %w", err)
	}
	if k.assemble, err = k.assembleModule.Function("damacy_assemble"); err == nil {
		k.reduceStatus, err = k.statusModule.Function("damacy_reduce_status")
	}
	if err == nil {
		k.lz4Check, err = k.statusModule.Function("damacy_lz4_check")
	}
	if err == nil {
		k.bloscLZ, err = k.bloscLZModule.Function("damacy_blosclz")
	}
	if err != nil {
		k.Unload()
		return nil, fmt.Errorf("ptx: %w", err)
	}
	return k, nil
}

// Unload unloads the modules (cuModuleUnload) on a thread with their
// context current. Work already queued still runs. Unload is safe to
// repeat; the Kernels are unusable afterwards.
func (k *Kernels) Unload() error {
	err := errors.Join(k.assembleModule.Unload(), k.statusModule.Unload(), k.bloscLZModule.Unload())
	k.assemble, k.reduceStatus, k.lz4Check, k.bloscLZ = 0, 0, 0, 0
	if err != nil {
		return fmt.Errorf("ptx: unload: %w", err)
	}
	return nil
}

// assembleParams mirrors kernels.h's struct damacy_assemble_params, the
// assemble kernel's only parameter.
type assembleParams struct {
	_          structs.HostLayout
	ops        cuda.DevicePtr
	blockOps   cuda.DevicePtr
	arena      cuda.DevicePtr
	out        cuda.DevicePtr
	transforms cuda.DevicePtr
	misfits    cuda.DevicePtr
	rank       uint32
	outDtype   uint32
	shape      [MaxRank]uint32
}

// AssembleArgs are the device buffers of one assemble launch. All of them
// must stay untouched until the launch has completed.
type AssembleArgs struct {
	// Ops and BlockOps are device copies of the plan's Ops (see OpBytes)
	// and BlockOps (see BlockOpBytes), 8- and 4-byte aligned.
	Ops, BlockOps cuda.DevicePtr
	// Transforms is a device copy of the plan's Transforms (see
	// TransformBytes), 4-byte aligned; 0 exactly when Transforms is nil.
	Transforms cuda.DevicePtr
	// Arena holds ArenaBytes bytes of decoded chunks, 8-byte aligned.
	Arena      cuda.DevicePtr
	ArenaBytes int64
	// Out is the batch tensor of the plan's layout, aligned to its
	// element size.
	Out cuda.DevicePtr
	// Misfits is a zeroed MisfitStatus (MisfitStatusSize bytes, 8-byte
	// aligned) that the kernel adds the values that do not fit an integer
	// output to, or 0 for none; it is required when the plan NeedsCheck,
	// and unused for a float output.
	Misfits cuda.DevicePtr
}

// Assemble queues the assemble kernel for plan p on s: one launch of
// p.Blocks() blocks over the buffers a. The ops must not overlap in the
// output. An empty plan queues nothing. For an integer output, read the
// MisfitStatus back after the launch (DecodeMisfitStatus) and fail the
// batch when it is not zero (MisfitStatus.Err).
func (k *Kernels) Assemble(s cuda.Stream, p *Plan, a AssembleArgs) error {
	if k.assemble == 0 {
		return fmt.Errorf("ptx: assemble on unloaded kernels: %w", ErrInvalid)
	}
	if p.Blocks() == 0 {
		return nil
	}
	if p.SourceEnd() > a.ArenaBytes {
		return fmt.Errorf("ptx: assemble: ops read up to byte %d of an arena of %d: %w", p.SourceEnd(), a.ArenaBytes, ErrInvalid)
	}
	if (a.Transforms != 0) != (p.Transforms() != nil) {
		return fmt.Errorf("ptx: assemble: transform table %v for a plan with %d transforms: %w", a.Transforms, len(p.Transforms()), ErrInvalid)
	}
	if a.Misfits == 0 && p.NeedsCheck() {
		return fmt.Errorf("ptx: assemble: no misfit status for %v output from sources that may not fit it: %w", p.layout.Dtype, ErrInvalid)
	}
	// Copy ops read sources with loads of their item size, ops and the
	// block table with 4- and 8-byte loads.
	outAlign := cuda.DevicePtr(p.layout.Dtype.Size())
	if a.Ops == 0 || a.BlockOps == 0 || a.Out == 0 || a.Ops%8 != 0 || a.BlockOps%4 != 0 || a.Arena%8 != 0 ||
		a.Out%outAlign != 0 || a.Transforms%4 != 0 || a.Misfits%8 != 0 {
		return fmt.Errorf("ptx: assemble: misaligned or nil buffer (ops %v, block table %v, arena %v, out %v, transforms %v, misfits %v): %w",
			a.Ops, a.BlockOps, a.Arena, a.Out, a.Transforms, a.Misfits, ErrInvalid)
	}
	params := assembleParams{ops: a.Ops, blockOps: a.BlockOps, arena: a.Arena, out: a.Out,
		transforms: a.Transforms, misfits: a.Misfits, rank: uint32(len(p.layout.Shape)), outDtype: uint32(p.layout.Dtype)}
	for d, x := range p.layout.Shape {
		params.shape[d] = uint32(x)
	}
	err := k.assemble.Launch(cuda.Dim3{X: uint32(p.Blocks())}, cuda.Dim3{X: assembleThreads}, 0, s, &params)
	if err != nil {
		return fmt.Errorf("ptx: assemble: %w", err)
	}
	return nil
}

// statusParams mirrors kernels.h's struct damacy_status_params.
type statusParams struct {
	_        structs.HostLayout
	statuses cuda.DevicePtr
	actual   cuda.DevicePtr
	expected cuda.DevicePtr
	summary  cuda.DevicePtr
	n        uint32
	_        uint32
}

// StatusSummarySize is the size of a StatusSummary in device memory.
const StatusSummarySize = 32

// NoChunk is StatusSummary.First when no chunk failed.
const NoChunk = 0xFFFFFFFF

// A StatusSummary is what ReduceStatus writes, laid out exactly as
// kernels.h's struct damacy_status_summary: how many chunks of a wave
// failed and which failed first.
type StatusSummary struct {
	_ structs.HostLayout
	// Bad counts the chunks whose status is not 0 (nvcompSuccess) or whose
	// decoded size differs from the expected size.
	Bad uint32
	// First is the index of the first bad chunk, or NoChunk.
	First uint32
	// Status is the first bad chunk's nvCOMP status.
	Status int32
	_      uint32
	// Actual and Expected are its decoded and expected sizes.
	Actual   uint64
	Expected uint64
}

// DecodeStatusSummary reads a StatusSummary from the StatusSummarySize
// bytes ReduceStatus wrote (copied to the host; host byte order).
func DecodeStatusSummary(b []byte) (StatusSummary, error) {
	if len(b) != StatusSummarySize {
		return StatusSummary{}, fmt.Errorf("ptx: status summary of %d bytes, want %d: %w", len(b), StatusSummarySize, ErrInvalid)
	}
	e := binary.NativeEndian
	return StatusSummary{
		Bad:      e.Uint32(b[0:]),
		First:    e.Uint32(b[4:]),
		Status:   int32(e.Uint32(b[8:])),
		Actual:   e.Uint64(b[16:]),
		Expected: e.Uint64(b[24:]),
	}, nil
}

// ReduceStatus queues the status kernel on s: it reads n nvCOMP statuses
// (int32), decoded sizes and expected sizes (uint64, as size_t) and writes
// one StatusSummary (StatusSummarySize bytes, 8-aligned) to summary. The
// kernel writes every field, so summary needs no clearing between waves.
func (k *Kernels) ReduceStatus(s cuda.Stream, statuses, actual, expected cuda.DevicePtr, n int, summary cuda.DevicePtr) error {
	if k.reduceStatus == 0 {
		return fmt.Errorf("ptx: reduce status on unloaded kernels: %w", ErrInvalid)
	}
	if n < 0 || n >= NoChunk {
		return fmt.Errorf("ptx: reduce status of %d chunks: %w", n, ErrInvalid)
	}
	if summary == 0 || summary%8 != 0 || statuses%4 != 0 || actual%8 != 0 || expected%8 != 0 {
		return fmt.Errorf("ptx: reduce status: misaligned or nil buffer (statuses %v, actual %v, expected %v, summary %v): %w", statuses, actual, expected, summary, ErrInvalid)
	}
	params := statusParams{statuses: statuses, actual: actual, expected: expected, summary: summary, n: uint32(n)}
	if err := k.reduceStatus.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: statusThreads}, 0, s, &params); err != nil {
		return fmt.Errorf("ptx: reduce status: %w", err)
	}
	return nil
}

// lz4CheckParams mirrors kernels.h's struct damacy_lz4_check_params.
type lz4CheckParams struct {
	_        structs.HostLayout
	ptrs     cuda.DevicePtr
	lens     cuda.DevicePtr
	expected cuda.DevicePtr
	empty    cuda.DevicePtr
	n        uint32
	_        uint32
}

// LZ4Check queues the LZ4 check kernel on s over n raw LZ4 blocks, given
// as nvCOMP's argument arrays (ptrs: block addresses, lens: uint64 block
// lengths, expected: uint64 decoded sizes; 8-aligned). Each block must
// pass the walk of nvcomp.LZ4GPUCheck, which keeps nvCOMP's LZ4 decoder
// from writing outside the block's output or decoding bytes that follow
// it. A block that fails has its address replaced by empty and its length
// by 1: empty must hold the one-byte LZ4 block 0x00, which nvCOMP decodes
// to nothing, so its decoded size differs from the expected one and
// ReduceStatus counts it as failed.
func (k *Kernels) LZ4Check(s cuda.Stream, ptrs, lens, expected cuda.DevicePtr, n int, empty cuda.DevicePtr) error {
	if k.lz4Check == 0 {
		return fmt.Errorf("ptx: lz4 check on unloaded kernels: %w", ErrInvalid)
	}
	if n < 0 || n >= NoChunk {
		return fmt.Errorf("ptx: lz4 check of %d blocks: %w", n, ErrInvalid)
	}
	if n == 0 {
		return nil
	}
	if empty == 0 || ptrs%8 != 0 || lens%8 != 0 || expected%8 != 0 || ptrs == 0 || lens == 0 || expected == 0 {
		return fmt.Errorf("ptx: lz4 check: misaligned or nil buffer (ptrs %v, lens %v, expected %v, empty %v): %w", ptrs, lens, expected, empty, ErrInvalid)
	}
	params := lz4CheckParams{ptrs: ptrs, lens: lens, expected: expected, empty: empty, n: uint32(n)}
	blocks := (n + lz4CheckThreads - 1) / lz4CheckThreads
	if err := k.lz4Check.Launch(cuda.Dim3{X: uint32(blocks)}, cuda.Dim3{X: lz4CheckThreads}, 0, s, &params); err != nil {
		return fmt.Errorf("ptx: lz4 check: %w", err)
	}
	return nil
}

// bloscLZParams mirrors kernels.h's struct damacy_blosclz_params.
type bloscLZParams struct {
	_        structs.HostLayout
	ptrs     cuda.DevicePtr
	lens     cuda.DevicePtr
	outs     cuda.DevicePtr
	caps     cuda.DevicePtr
	actual   cuda.DevicePtr
	statuses cuda.DevicePtr
	n        uint32
	_        uint32
}

// BloscLZArgs are the arrays of one blosclz launch, laid out as nvCOMP's
// batched decoders take them (nvcomp.Batch): N entries each, 8-byte
// aligned (Statuses 4-byte).
type BloscLZArgs struct {
	N int
	// Ptrs and Lens are the streams' device addresses and uint64 lengths;
	// Outs and Caps their outputs' addresses and uint64 sizes.
	Ptrs, Lens, Outs, Caps cuda.DevicePtr
	// Sizes receives the uint64 bytes each stream wrote, Statuses its
	// int32 status (0: decoded).
	Sizes, Statuses cuda.DevicePtr
}

// BloscLZ queues the blosclz kernel on s over a.N blosclz streams (of
// blosc chunks). A stream decodes to exactly its output's size: one whose
// length equals that size is stored raw (c-blosc's rule) and copied; a
// damaged one gets status 12 (nvCOMP's nvcompErrorCannotDecompress) and
// writes nothing outside its output.
func (k *Kernels) BloscLZ(s cuda.Stream, a BloscLZArgs) error {
	if k.bloscLZ == 0 {
		return fmt.Errorf("ptx: blosclz on unloaded kernels: %w", ErrInvalid)
	}
	n := a.N
	if n < 0 || n >= NoChunk {
		return fmt.Errorf("ptx: blosclz of %d streams: %w", n, ErrInvalid)
	}
	if n == 0 {
		return nil
	}
	for _, p := range []cuda.DevicePtr{a.Ptrs, a.Lens, a.Outs, a.Caps, a.Sizes} {
		if p == 0 || p%8 != 0 {
			return fmt.Errorf("ptx: blosclz: misaligned or nil array %v: %w", p, ErrInvalid)
		}
	}
	if a.Statuses == 0 || a.Statuses%4 != 0 {
		return fmt.Errorf("ptx: blosclz: misaligned or nil statuses %v: %w", a.Statuses, ErrInvalid)
	}
	params := bloscLZParams{ptrs: a.Ptrs, lens: a.Lens, outs: a.Outs, caps: a.Caps,
		actual: a.Sizes, statuses: a.Statuses, n: uint32(n)}
	const warps = bloscLZThreads / 32
	blocks := (n + warps - 1) / warps
	if err := k.bloscLZ.Launch(cuda.Dim3{X: uint32(blocks)}, cuda.Dim3{X: bloscLZThreads}, 0, s, &params); err != nil {
		return fmt.Errorf("ptx: blosclz: %w", err)
	}
	return nil
}
