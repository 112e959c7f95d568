package pipeline

import (
	"context"
	"time"
)

// maxWaveParts bounds how many batches one wave may carry chunks of (see
// planWaves).
const maxWaveParts = 4

// planWaves turns requests into waves: the first stage of both engines.
// A batch that cannot be planned travels as one wave carrying its error,
// so that results stay in order.
//
// With span (the CUDA engine, whose nvCOMP calls take about as long for a
// few chunks as for a full wave), a batch's last wave is kept back until
// the next request is planned, and that batch's first chunks join it: the
// held wave goes out with joinsNext set, and the next batch's first wave
// (carried) shares its slab, arena and nvCOMP calls. A request that is not
// queued yet is not waited for: the held wave then goes out alone, so a
// batch is never later than it would be on its own by more than the
// planning of the next one.
func (s *stages) planWaves(ctx context.Context, reqs <-chan *batchReq, out chan<- *wave, route func(*job), span bool) {
	defer close(out)
	send := func(w *wave) bool {
		select {
		case out <- w:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var held *wave // span: the last batch's last wave, not sent yet
	parts := 0     // batches sharing held's wave so far
	for {
		var req *batchReq
		if held != nil {
			var ok bool
			select {
			case req, ok = <-reqs:
			default:
				if !send(held) {
					return
				}
				held = nil
				continue
			}
			if !ok {
				send(held)
				return
			}
		} else {
			var ok bool
			if req, ok = <-reqs; !ok {
				return
			}
		}
		carry := held
		if parts >= maxWaveParts {
			carry = nil
		}
		waves := s.planRequest(req, route, carry)
		if held != nil {
			held.joinsNext = waves[0].carried
			if !send(held) {
				return
			}
			held = nil
		}
		if w := waves[len(waves)-1]; span && w.batch.failed() == nil {
			if w.carried {
				parts++
			} else {
				parts = 1
			}
			held, waves = w, waves[:len(waves)-1]
		}
		for _, w := range waves {
			if !send(w) {
				return
			}
		}
	}
}

// planRequest plans one request into its waves; the first may share carry's
// slab (carry nil: it starts its own).
func (s *stages) planRequest(req *batchReq, route func(*job), carry *wave) []*wave {
	bs := &batchState{req: req, t0: time.Now(), skip: s.cfg.OnError == OnErrorSkip}
	var versions *batchVersions
	if s.chunks != nil {
		versions = newBatchVersions(s.fds.files, s.maps)
	}
	var hits []*cacheEntry
	lookup := func(j *job) {
		if s.chunks != nil && s.chunks.wants(j) {
			k := versions.key(j.src, &j.chunk)
			if j.hit = s.chunks.lookup(k, &j.psrc); j.hit != nil {
				j.psrc = j.hit.src
				hits = append(hits, j.hit)
				return
			}
			if s.chunks.admit(k, int64(j.layout.Bytes())) {
				j.cacheKey = &k
			}
		}
		route(j)
	}
	if req.err != nil {
		bs.fail(req.err)
		return []*wave{{batch: bs, last: true}}
	}
	bp, err := planBatch(s.meta, req, s.cfg.MaxChunkBytes, versions.locator, lookup)
	if err == nil {
		err = bp.cutWaves(bs, s.lim, carry)
	}
	if err != nil {
		s.releaseAll(hits)
		bs.fail(err)
		return []*wave{{batch: bs, last: true}}
	}
	bs.plan = bp
	var dedup int64
	for _, j := range bp.jobs {
		dedup += int64(max(j.waveUses-1, 0))
	}
	s.trace.span(Span{Stage: "plan", Lane: "planner", Batch: req.id, Wave: -1, Start: bs.t0, End: time.Now()})
	s.stats.update(func(st *Stats) {
		st.Plan.add(time.Since(bs.t0), 0, 0)
		st.BoxBytes += bp.box
		st.ChunksDeduped += dedup
	})
	return bp.waves
}
