// Package nvcomp binds NVIDIA's nvCOMP library (libnvcomp.so.N) at run time
// through purego, without cgo, for batched zstd and LZ4 decompression on the
// GPU. nvCOMP is optional: when it is absent or of an unknown version,
// callers decode on the CPU, and Load's error says why.
//
// # Loading
//
// Load finds the library (DAMACY_NVCOMP, then the dynamic loader, then the
// pip wheel layouts in the active virtualenv or conda environment), reads
// its version with nvcompGetProperties and binds the decompression ABI of
// that major version:
//
//   - 4.x: GetTempSizeEx, a 10-argument DecompressAsync, no options, fixed
//     alignments (untested: no 4.x library was at hand);
//   - 5.x: a 64-byte options struct passed by value, GetTempSizeAsync,
//     GetRequiredAlignments, an 11-argument DecompressAsync;
//   - 6.x: as 5.x, but the temp-size query is renamed
//     nvcomp*DecompressGetTempSize and takes a trailing stream. The 6.0
//     headers also renumber nvcompType_t (FLOAT16 moved from 9 to 10),
//     which decompression without bitshuffle does not use.
//
// Every call passes the options with the CUDA backend, never DEFAULT, which
// may pick a hardware engine that reports corrupt LZ4 input as success.
// On amd64 the hot call goes through purego.SyscallN with the options
// struct spelled as eight stack words: no allocation per call.
//
// # What nvCOMP does with imperfect input
//
// As nvCOMP 5.3.0 and 6.0.0 behave (the GPU tests check each point),
// nvCOMP's decoders are fast, not defensive:
//
//   - neither the zstd nor the LZ4 decoder bounds its writes by the
//     output capacity: output that does not fit is written past the end of
//     the buffer, into the neighbours' outputs, with a success status;
//   - LZ4 reads past the compressed size of a truncated block and reports
//     success with garbage;
//   - zstd content checksums are not verified; of several frames only the
//     first is decoded; a leading skippable frame makes the kernel fault,
//     which ends the CUDA context; damage inside compressed zstd blocks can
//     give a success status with wrong bytes, or a kernel that never ends;
//   - batches of 4096 valid zstd chunks of 256 KiB or more faulted, see
//     MaxZstdBatchBytes.
//
// Per-chunk statuses therefore cannot be the only guard. The package keeps
// nvCOMP to input it decodes exactly like the CPU decoders: ZstdGPUReason
// admits single frames whose content size equals the expected size, and
// LZ4GPUCheck walks an LZ4 block's sequences to prove that it decodes to
// exactly the expected size inside its own output. Chunks that fail go to
// the CPU, which decodes them or reports the error. (On the host the walk
// costs nearly as much as pierrec's decode, so the pipeline runs its GPU
// twin, ptx's LZ4 check kernel, just before nvCOMP: a refused block is
// decoded to nothing, fails the status check, and goes to the CPU then.)
// After decoding, the caller checks every chunk's status and size
// (CheckChunk, or a kernel that reduces them), and waits for the GPU with
// a deadline.
//
// # Throughput
//
// nvCOMP overtakes 16 CPU cores only from a thousand or two chunks per
// batched call (cmd/damacy/BENCH.md, "nvCOMP decode alone", which
// TestDecodeThroughput measures): batch thousands of chunks per Decode.
//
// Imports: the standard library, purego and package cuda.
package nvcomp
