// Package bench is the harness behind damacy bench and damacy gen:
// scenarios (a synthetic dataset and how to read it, with the built-in
// ones embedded), the generation of their datasets, the boxes a run
// reads, the run with its report and trace, the check of a batch against
// the reference reader, and the ceilings measured after the run over the
// same boxes.
//
// The ceilings time the code a run runs: they plan with the pipeline's
// plan.Batch through a cache.Locator, read through its open-file cache on
// a work pool, assemble with plan.AddOp, and give nvCOMP and the blosclz
// kernel what the CUDA engine gives them (plan.GPUStreams).
//
// A remote dataset (--data s3://...) is read as any user's pipeline reads
// it; its ceiling is a GET replay through the same kind of store, whose
// GETs can be written out for a load generator (--gets-out), and the run
// can go through a shaped link on loopback (--link, package netshape).
//
// Imports: the standard library; pipeline, with pipeline/sampler and the
// module's internal packages the ceilings share with a run (internal/plan,
// internal/cache, internal/work); zarr, zarr/blosc, zarr/remote and
// zarr/writer; cuda, nvcomp and ptx; and the command's base and netshape.
package bench
