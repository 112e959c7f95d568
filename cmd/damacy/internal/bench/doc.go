// Package bench is the harness behind damacy bench and damacy gen:
// scenarios (a synthetic dataset and how to read it, with the built-in
// ones embedded), the generation of their datasets, the boxes a run
// reads, the run with its report and trace, the check of a batch against
// the reference reader, and the ceilings measured after the run over the
// same boxes.
//
// The ceilings time the code a run runs: they plan with the pipeline's
// plan.Batch through a cache.Locator, read through its open-file cache on
// a work pool, assemble with plan.AddOp, and give nvCOMP what the CUDA
// engine gives it (plan.NVCOMPStreams).
package bench
