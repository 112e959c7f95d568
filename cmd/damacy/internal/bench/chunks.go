package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The values of run.boxes.
const (
	// BoxesRandom draws the boxes with run.sampler (uniformly by default).
	BoxesRandom = "random"
	// BoxesChunks reads every chunk once, one box per chunk of the
	// arrays' chunk grid (the shard of a sharded array), array after
	// array, in C order of the grid: the read-chunks method of the public
	// zarr benchmark (LDeakin/zarr_benchmarks).
	BoxesChunks = "chunks"
)

// ValuesZarrBenchmarks is dataset.values for the public zarr benchmark's
// arrays (writer.BenchmarkFill).
const ValuesZarrBenchmarks = "zarr_benchmarks"

// chunked reports whether the run reads every chunk (run.boxes chunks).
func (r *RunSpec) chunked() bool { return r.Boxes == BoxesChunks }

// gridChunk is the shape of the arrays' chunk grid: the shard of a
// sharded dataset, else the chunk.
func (d *DatasetSpec) gridChunk() []int64 {
	if d.Shard != nil {
		return d.Shard
	}
	return d.Chunk
}

// gridChunks is how many chunks of grid (a chunk shape) an array of shape
// has.
func gridChunks(shape, grid []int64) int64 {
	n := int64(1)
	for i, s := range shape {
		n *= (s + grid[i] - 1) / grid[i]
	}
	return n
}

// validateBoxes checks run.boxes and, for chunks, resolves the run against
// the dataset: the sample shape is the grid's chunk (it may be omitted),
// and run.batches, 0 for the whole pass, is the number of batches that
// read every chunk once (the last one ragged), or fewer.
func (r *RunSpec) validateBoxes(d *DatasetSpec) error {
	switch r.Boxes {
	case "", BoxesRandom:
		return nil
	case BoxesChunks:
	default:
		return fieldErr("run.boxes", "%q: want random or chunks", r.Boxes)
	}
	grid := d.gridChunk()
	if len(r.Config.SampleShape) == 0 {
		r.setShape(grid)
	}
	if !slices.Equal(r.shape(), grid) {
		return fieldErr("run.config.sample_shape", "%v: with run.boxes chunks the boxes are the chunks of the grid, %v: omit it or give that", r.Config.SampleShape, grid)
	}
	if r.Sampler != nil {
		return fieldErr("run.sampler", "does not apply to run.boxes chunks, which reads every chunk")
	}
	if r.Epochs > 1 {
		return fieldErr("run.epochs", "%d: run.boxes chunks reads every chunk once", r.Epochs)
	}
	total := (int64(d.Arrays)*gridChunks(d.Shape, grid) + int64(r.Config.BatchSize) - 1) / int64(r.Config.BatchSize)
	switch {
	case r.Batches < 0:
		return fieldErr("run.batches", "%d: must not be negative", r.Batches)
	case int64(r.Batches) > total:
		return fieldErr("run.batches", "%d: the %d chunks of the arrays make %d batches of %d", r.Batches, int64(d.Arrays)*gridChunks(d.Shape, grid), total, r.Config.BatchSize)
	case r.Batches == 0:
		if total > 1<<30 {
			return fieldErr("run.batches", "the arrays have %d chunks: give a number of batches", int64(d.Arrays)*gridChunks(d.Shape, grid))
		}
		r.Batches = int(total)
	}
	return nil
}

// chunkBox is chunk k, in C order, of the grid of chunks of shape grid
// over an array of shape.
func chunkBox(shape, grid []int64, k int64) [][2]int64 {
	box := make([][2]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		n := (shape[d] + grid[d] - 1) / grid[d]
		g := k % n
		k /= n
		box[d] = [2]int64{g * grid[d], (g + 1) * grid[d]}
	}
	return box
}

// chunkStream is the read-chunks method's boxes from the first: every
// chunk of every array once, array after array, then again from the
// start.
func chunkStream(sc *Scenario) func() func() (boxSample, bool) {
	d := &sc.Dataset
	grid := d.gridChunk()
	per := gridChunks(d.Shape, grid)
	return func() func() (boxSample, bool) {
		var k int64
		return func() (boxSample, bool) {
			s := boxSample{Array: int(k / per % int64(d.Arrays)), Box: chunkBox(d.Shape, grid, k%per)}
			k++
			return s, false
		}
	}
}

// passSamples is how many samples the measured batches of a run of
// run.boxes chunks read: run.batches full batches, or every chunk when
// the last of them is ragged.
func (sc *Scenario) passSamples() int {
	n := sc.Run.Batches * sc.Run.Config.BatchSize
	if sc.Run.chunked() {
		n = int(min(int64(n), int64(sc.Dataset.Arrays)*gridChunks(sc.Dataset.Shape, sc.Dataset.gridChunk())))
	}
	return n
}

// measuredBatch is the samples of measured batch b (the last one may be
// ragged).
func (bs *boxSet) measuredBatch(b int) []boxSample {
	measured := bs.Samples[bs.Warmup*bs.BatchSize:]
	return measured[b*bs.BatchSize : min((b+1)*bs.BatchSize, len(measured))]
}

// SetBoxes sets how the run's boxes are chosen, as damacy bench --boxes
// says: "chunks" (every chunk once), or a box shape such as
// "128,128,128" for random boxes of that shape, as many batches as the
// scenario's run gives or, when it read every chunk, as many as hold the
// arrays' voxels once. The scenario is checked again.
func (sc *Scenario) SetBoxes(spec string) error {
	r := &sc.Run
	if spec == BoxesChunks {
		if !r.chunked() {
			r.Boxes, r.Config.SampleShape, r.Batches = BoxesChunks, nil, 0
		}
		return sc.revalidate()
	}
	shape, err := parseShape(spec)
	if err != nil || len(shape) != len(sc.Dataset.Shape) {
		return fmt.Errorf("--boxes %s: want chunks, or a box shape of %d axes such as %s", spec, len(sc.Dataset.Shape), formatShape(sc.Dataset.gridChunk()))
	}
	if r.chunked() {
		voxels, box := int64(sc.Dataset.Arrays), int64(r.Config.BatchSize)
		for i, n := range sc.Dataset.Shape {
			voxels *= n
			box *= shape[i]
		}
		r.Batches = int(max((voxels+box-1)/box, 1))
	}
	r.Boxes = BoxesRandom
	r.setShape(shape)
	return sc.revalidate()
}

// parseShape parses a box shape written as positive integers separated by
// commas ("128,128,128").
func parseShape(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// formatShape writes a shape as parseShape reads it.
func formatShape(s []int64) string {
	f := make([]string, len(s))
	for i, n := range s {
		f[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(f, ",")
}
