// Package nvcomp binds NVIDIA's nvCOMP library (libnvcomp.so.N) at run time
// through purego, without cgo.
//
// It owns: discovery of the library (DAMACY_NVCOMP, the dynamic loader, the
// pip wheel layouts), version and ABI detection per major version, and a
// batched zstd / LZ4 Decoder that runs on a CUDA stream and leaves per-chunk
// statuses on the device. nvCOMP is optional: when it is absent or of an
// unknown version, callers decode on the CPU.
//
// Imports: the standard library, purego and package cuda.
package nvcomp
