// Package plan holds the half of the pipeline's planning that does not
// depend on an engine: the zarr-level plan of a batch (Batch: each stored
// chunk once, however many samples overlap it, and the copies that place
// it or the fill value in the samples), the assemble ops that add those
// copies to a ptx assemble plan, the rule that decides what nvCOMP
// receives of a chunk, and how reads of one object merge into ranged GETs.
//
// It is internal to the module. Package pipeline builds each engine's
// batch plan (the jobs, cut into waves) on a Batch; damacy bench's
// ceilings (cmd/damacy/internal/bench) plan, assemble and feed nvCOMP with
// the same code, so that a ceiling measures the code a run runs.
//
// Imports: the standard library; zarr and zarr/blosc, ptx and nvcomp.
package plan
