// Package work is the pipeline's worker pool: a fixed set of goroutines
// that runs a stage's tasks (reads, checks, CPU decoding) and reports
// where each worker spent its time.
//
// It is internal to the module. Package pipeline runs its IO and CPU
// stages on it, and damacy bench's ceilings (cmd/damacy/internal/bench)
// run their reads and decodes on the same pool a run does.
//
// Imports: the standard library.
package work
