// Package pipeline streams boxes cut out of zarr arrays into batches of
// float32 or bfloat16 tensors, in GPU memory (the CUDA engine) or in host
// memory (the host engine).
//
// It owns: Config, Sample, Pipeline, Batch, Stats and the error type; the
// planner, metadata caches, IO, staging, decode and assemble stages.
//
// Imports: zarr, cuda, nvcomp, ptx and dlpack. Nothing in the module
// imports pipeline except cmd/damacy.
package pipeline
