package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// hostScratchBytes bounds the chunks a CPU worker of the host engine
// decodes into its own scratch buffer instead of the arena: small enough
// that the decoded chunk is still in the core's cache when the ops that
// read it run.
const hostScratchBytes = 1 << 20

// hostWorker is what a CPU task of the host engine's compute borrows: a
// scratch buffer for one decoded chunk (hostScratchBytes and the
// decoder's slack) and scratch rows for the ops.
type hostWorker struct {
	chunk []byte
	rows  *ptx.HostScratch
}

func newHostWorker() *hostWorker {
	return &hostWorker{chunk: make([]byte, hostScratchBytes+zarr.DecodeSlack), rows: ptx.NewHostScratch()}
}

// compute decodes a wave's chunks and gathers them into the batch slot.
// Each CPU task decodes one chunk and at once runs the ops that read it,
// while the chunk is in the core's cache. A chunk of at most
// hostScratchBytes that is not headed for the chunk cache is decoded into
// the worker's scratch buffer, not into the arena, so its bytes need never
// reach memory; a raw chunk is read where it lies when it can be
// (inPlace). The ops that read chunks the cache holds, and the fills, are
// tasks of their own. A chunk larger than h.split.min is split instead
// (bigJob): its decoding into tasks that run beside the others, then,
// once every task has run, the ops that read it into tasks of their own.
func (h *hostEngine) compute(ctx context.Context, w *wave, full *ptx.Plan) error {
	p, err := assemblePlanFor(full, len(w.batch.req.samples))
	if err != nil {
		return err
	}
	bp := w.batch.plan
	byJob := make(map[int][]int32, len(w.jobs))
	var rest []int32
	elems, err := h.assemblePlan(p, w, func(j *job) int64 {
		if j.hit != nil {
			return h.lim.arena + j.hit.off
		}
		return j.decOff
	}, func(ji, from, to int) {
		for i := from; i < to; i++ {
			if ji >= 0 && bp.jobs[ji].hit == nil {
				byJob[ji] = append(byJob[ji], int32(i))
			} else {
				rest = append(rest, int32(i))
			}
		}
	})
	if err != nil {
		return err
	}
	l := p.Layout()
	a, err := ptx.NewHostAssembly(w.batch.slot.host[:l.Bytes()], l, h.arena, p.Ops(), p.Transforms())
	if err != nil {
		return newError("assemble", ErrInvalid, "", err)
	}
	var in, out int64
	var small []int
	for _, ji := range w.jobs {
		j := bp.jobs[ji]
		in += j.chunk.Length
		out += int64(j.layout.Bytes())
		if int64(j.layout.Bytes()) <= h.split.min {
			small = append(small, ji)
		}
	}
	stored := w.stored(w.slabBuf)
	var decT, asmT atomic.Int64
	start := time.Now()
	bigs, decodes, err := h.splitJobs(w, a, byJob, stored)
	ns, nd := len(small), len(decodes)
	if err == nil {
		err = h.cpu.Run(ctx, ns+nd+len(rest), func(i int) error {
			hw := <-h.workers
			defer func() { h.workers <- hw }()
			t0 := time.Now()
			switch {
			case i < ns:
				return h.computeJob(w, a, bp.jobs[small[i]], byJob[small[i]], stored, hw, &decT, &asmT)
			case i < ns+nd:
				t := decodes[i-ns]
				b := &bigs[t.chunk]
				err := w.guard(func() error { return h.decodePiece(&b.dec, t) })
				t1 := time.Now()
				decT.Add(int64(t1.Sub(t0)))
				if err == nil && b.fused {
					err = b.assemblePiece(a, t, hw.rows)
					asmT.Add(int64(time.Since(t1)))
				}
				return err
			}
			err := a.Run(rest[i-ns-nd:i-ns-nd+1], 0, nil, hw.rows)
			asmT.Add(int64(time.Since(t0)))
			return assembleError(err)
		}, h.trace.workers("decode", "cpu", w, out))
	}
	if err == nil && len(bigs) > 0 {
		var parts []asmTask
		for bi := range bigs {
			if !bigs[bi].fused {
				parts = bigs[bi].assembleTasks(bi, a, h.split.part, parts)
			}
		}
		err = h.cpu.Run(ctx, len(parts), func(i int) error {
			hw := <-h.workers
			defer func() { h.workers <- hw }()
			t0 := time.Now()
			t := parts[i]
			b := &bigs[t.big]
			err := w.guard(func() error {
				return assembleError(a.RunPart(t.op, t.start, t.n, b.j.decOff, b.from, hw.rows))
			})
			asmT.Add(int64(time.Since(t0)))
			return err
		}, h.trace.workers("assemble", "cpu", w, 0))
	}
	// The workers' spans cover their chunks' ops too; the wave's assemble
	// span, on the lane of them all, the whole of it.
	h.trace.span(Span{Stage: "assemble", Lane: "cpu workers", Batch: w.batch.req.id, Wave: w.index, Start: start, End: time.Now(), Bytes: elems * int64(l.Dtype.Size())})
	nj := len(w.jobs)
	h.stats.update(func(st *Stats) {
		if nj > 0 {
			st.Decompress.add(time.Duration(decT.Load()), in, out)
			st.ChunksDecoded += int64(nj)
		}
		st.Assemble.add(time.Duration(asmT.Load()), w.arena, elems*int64(l.Dtype.Size()))
		st.WavesEmitted++
	})
	if err != nil {
		return err
	}
	if p.NeedsCheck() {
		if err := misfitError(w.batch.req, a.Misfits(), l); err != nil {
			return err
		}
	}
	return h.cacheWave(ctx, w)
}

// splitJobs readies the wave's chunks larger than h.split.min to be split
// (a: the wave's assembly; byJob: the ops that read each job; stored: the
// jobs' stored bytes) and returns them with their decoding tasks.
func (h *hostEngine) splitJobs(w *wave, a *ptx.HostAssembly, byJob map[int][]int32, stored func(*job) []byte) ([]bigJob, []decodeTask, error) {
	bp := w.batch.plan
	var bigs []bigJob
	var decodes []decodeTask
	err := w.guard(func() error {
		for _, ji := range w.jobs {
			j := bp.jobs[ji]
			if int64(j.layout.Bytes()) <= h.split.min {
				continue
			}
			b, err := h.bigJob(w, j, byJob[ji], stored(j))
			if err != nil {
				return err
			}
			b.fuse(a)
			decodes = b.decodeTasks(len(bigs), decodes)
			bigs = append(bigs, b)
		}
		return nil
	})
	return bigs, decodes, err
}

// computeJob is the task of job j, not split: it reads the chunk in place
// or decodes it, then runs its ops, ops, on worker hw, adding the time
// each took to decT and asmT.
func (h *hostEngine) computeJob(w *wave, a *ptx.HostAssembly, j *job, ops []int32, stored func(*job) []byte, hw *hostWorker, decT, asmT *atomic.Int64) error {
	t0 := time.Now()
	// A fault reading a mapped file (truncated under its mapping) is an
	// error of its own, not the chunk's.
	return w.guard(func() error {
		from, err := h.inPlace(j, stored(j))
		if err != nil {
			return err
		}
		if from == nil {
			n := int64(j.layout.Bytes())
			// Capped: a decoder must not write past its chunk's room.
			dst := h.arena[j.decOff : j.decOff+n : j.decOff+n+zarr.DecodeSlack]
			if n <= hostScratchBytes && (h.chunks == nil || j.cacheKey == nil) {
				dst = hw.chunk[: n : n+zarr.DecodeSlack]
				from = dst
			}
			if err := h.decodeJob(j, stored(j), dst, j.bloscPayload); err != nil {
				return decodeError(j, err)
			}
		}
		t1 := time.Now()
		decT.Add(int64(t1.Sub(t0)))
		err = a.Run(ops, j.decOff, from, hw.rows)
		asmT.Add(int64(time.Since(t1)))
		return assembleError(err)
	})
}

// assembleError wraps an error of HostAssembly.Run (nil stays nil).
func assembleError(err error) error {
	if err == nil {
		return nil
	}
	return newError("assemble", ErrInvalid, "", err)
}

// cacheWave copies the chunks the wave decoded into the chunk cache, as
// far as room can be made, on the CPU workers.
func (h *hostEngine) cacheWave(ctx context.Context, w *wave) error {
	if h.chunks == nil {
		return nil
	}
	bp := w.batch.plan
	var jobs []*job
	var entries []*cacheEntry
	for _, ji := range w.jobs {
		j := bp.jobs[ji]
		if j.cacheKey == nil {
			continue
		}
		if e := h.chunks.reserve(*j.cacheKey, j.psrc, int64(j.layout.Bytes())); e != nil {
			jobs, entries = append(jobs, j), append(entries, e)
		}
	}
	cache := h.arena[h.lim.arena:]
	err := h.cpu.Run(ctx, len(jobs), func(i int) error {
		j, n := jobs[i], int64(jobs[i].layout.Bytes())
		copy(cache[entries[i].off:entries[i].off+n], h.arena[j.decOff:j.decOff+n])
		return nil
	}, nil)
	for _, e := range entries {
		if err != nil {
			h.chunks.drop(e)
		} else {
			h.chunks.publish(e)
		}
	}
	return err
}
