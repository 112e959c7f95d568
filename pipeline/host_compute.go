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
// reach memory. The ops that read chunks the cache holds, and the fills,
// are tasks of their own.
func (h *hostEngine) compute(ctx context.Context, w *wave, full *ptx.Plan) error {
	p, err := planFor(full, len(w.batch.req.samples))
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
	for _, ji := range w.jobs {
		in += bp.jobs[ji].chunk.Length
		out += int64(bp.jobs[ji].layout.Bytes())
	}
	stored := w.stored(w.slabBuf)
	var decT, asmT atomic.Int64
	nj := len(w.jobs)
	start := time.Now()
	err = h.cpu.Run(ctx, nj+len(rest), func(i int) error {
		hw := <-h.workers
		defer func() { h.workers <- hw }()
		t0 := time.Now()
		if i >= nj {
			err := a.Run(rest[i-nj:i-nj+1], 0, nil, hw.rows)
			asmT.Add(int64(time.Since(t0)))
			return assembleError(err)
		}
		j := bp.jobs[w.jobs[i]]
		n := int64(j.layout.Bytes())
		// Capped: a decoder must not write past its chunk's room.
		dst := h.arena[j.decOff : j.decOff+n : j.decOff+n+zarr.DecodeSlack]
		var from []byte
		if n <= hostScratchBytes && (h.chunks == nil || j.cacheKey == nil) {
			dst = hw.chunk[: n : n+zarr.DecodeSlack]
			from = dst
		}
		// A fault reading a mapped file (truncated under its mapping)
		// is an error of its own, not the chunk's.
		if err := w.guard(func() error {
			if err := h.decodeJob(j, stored(j), dst, j.bloscPayload); err != nil {
				return decodeError(j, err)
			}
			return nil
		}); err != nil {
			return err
		}
		t1 := time.Now()
		decT.Add(int64(t1.Sub(t0)))
		err := a.Run(byJob[w.jobs[i]], j.decOff, from, hw.rows)
		asmT.Add(int64(time.Since(t1)))
		return assembleError(err)
	}, h.trace.workers("decode", "cpu", w, out))
	// The workers' spans cover their chunks' ops too; the wave's assemble
	// span, on the lane of them all, the whole of it.
	h.trace.span(Span{Stage: "assemble", Lane: "cpu workers", Batch: w.batch.req.id, Wave: w.index, Start: start, End: time.Now(), Bytes: elems * int64(l.Dtype.Size())})
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
