// Package ptx holds the project's CUDA kernels and their exact host twin.
//
// The kernels are CUDA C, compiled by nvcc to PTX for the virtual
// architecture compute_75 so that one image runs on Turing through
// Blackwell, with the PTX ISA version held at 8.0 so that CUDA 12.0 and
// newer drivers can JIT it. The generated PTX is committed and embedded,
// with a stamp of its inputs' hashes that a test holds it to; the README
// beside the sources says how to regenerate it.
//
// # Assemble
//
// A wave's decoded chunks sit in a device arena, each at a byte offset. The
// assemble kernel gathers them into the batch tensor [N, *shape] of
// float32, bfloat16 or an integer type in one launch per wave. Its work
// is a list of ops (Op, built with a Plan): each op is a box of one
// sample, filled either
// from the same-shaped box of one chunk (any source dtype, either byte
// order, any strides, so C order, F order and transposes alike, and
// blosc byte or bit shuffle undone in place) or with a fill value (missing
// chunks, the parts of a box outside the array). AssembleHost executes the
// same ops on the CPU with the same results bit for bit; the host engine
// uses it directly and the tests hold the kernel to it.
//
// Casts follow Go's float32(x) conversion (Float32Bits), and bfloat16
// rounds to nearest even with every NaN made 0x7FFF (BFloat16Bits), on the
// host and on the GPU alike. Label sources may instead be written to an
// integer output type without float conversion (IntBits); a value that
// does not fit it is counted into a MisfitStatus, never wrapped. Each
// sample may carry a Transform (flips, rotations and permutations of
// equal-extent axes, and on float outputs an intensity map), applied as
// the sample is written.
//
// # Status
//
// ReduceStatus folds nvCOMP's per-chunk statuses and decoded sizes into one
// StatusSummary, so that the host reads a few bytes per wave.
//
// # Blosc frames are parsed on the host
//
// There is no GPU blosc parser. Compressed chunks arrive in pinned host
// memory, where the IO stage can read a blosc header, its block starts and
// split sizes for the cost of a few cache misses, and turn them into
// nvCOMP's sub-stream lists and the ops' blosc geometry (typesize,
// blocksize, shuffle) before anything is copied. A device-side parser would
// need a device-to-host round trip per wave to size the nvCOMP launch,
// which stalls the pipeline; the reference system pays exactly that.
//
// Imports: the standard library, package cuda, and (on amd64, unless built
// with the purego tag) the module's internal/cpu, which says whether the
// CPU has AVX2.
package ptx
