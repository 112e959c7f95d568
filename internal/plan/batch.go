package plan

import "github.com/damacy-go/damacy/zarr"

// Batch is the zarr-level plan of one batch: the stored chunks its samples
// need, each once however many samples overlap it, and the copies that
// place them (or the fill value) in the samples. A tells the batch's
// arrays apart. The zero Batch is empty and ready to use.
type Batch[A comparable] struct {
	Jobs     []Job[A] // in the order the samples first need them
	Copies   []Copy   // sample after sample, in each plan's order
	BoxBytes int64    // bytes of the boxes in their source data types

	seen map[jobKey[A]]int
}

// Job is one stored chunk of a batch.
type Job[A comparable] struct {
	Array  A
	Sample int // the first sample that needs it
	Chunk  zarr.Chunk
}

// Copy places one block of a sample: from a job's decoded chunk, or
// (Job < 0) the fill value of the sample's array.
type Copy struct {
	Sample int
	Job    int     // index into Batch.Jobs, or -1
	Src    []int64 // where the block starts in the job's chunk
	Dst    []int64 // where it goes in the sample
	Shape  []int64 // its extent
}

type jobKey[A comparable] struct {
	array  A
	key    string
	offset int64
}

// Add adds zp, the plan of sample's box over array a: its chunks not yet in
// the batch become jobs, and its copies refer to the batch's jobs. It
// returns the index of the first job it added (len(b.Jobs) when none).
func (b *Batch[A]) Add(sample int, a A, zp *zarr.Plan) int {
	if b.seen == nil {
		b.seen = map[jobKey[A]]int{}
	}
	first := len(b.Jobs)
	b.BoxBytes += int64(zp.Bytes())
	local := make([]int, len(zp.Chunks)) // zp chunk -> batch job
	for i := range zp.Chunks {
		c := zp.Chunks[i]
		k := jobKey[A]{a, c.Key, c.Offset}
		j, ok := b.seen[k]
		if !ok {
			j = len(b.Jobs)
			b.seen[k] = j
			b.Jobs = append(b.Jobs, Job[A]{Array: a, Sample: sample, Chunk: c})
		}
		local[i] = j
	}
	for _, c := range zp.Copies {
		cp := Copy{Sample: sample, Job: -1, Dst: c.Dst, Shape: c.Shape}
		if c.Chunk >= 0 {
			cp.Job = local[c.Chunk]
			cp.Src = c.Src
		}
		b.Copies = append(b.Copies, cp)
	}
	return first
}
