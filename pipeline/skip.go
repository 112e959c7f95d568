package pipeline

import (
	"cmp"
	"errors"
	"slices"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// Config.OnError's OnErrorSkip works in three places, the same for both
// engines:
//
//   - as a batch is cut (split): a sample whose array or a source's
//     cannot be opened, or that a PushSeq sequence got wrong, is left out
//     of every source's request before any engine sees it;
//   - in the engines' shared exits (batchState.keepsSlot, emit): a batch
//     that fails with a sample's error (sampleFault) keeps its batch slot,
//     taken in order like any other, and reaches Pop with it;
//   - in Pop (salvage): such a batch is read again, one sample at a time,
//     on the CPU as the host engine reads it (readSample); each sample
//     that fails again is left out, and the others go into the slot, in
//     order (writeSlot).
//
// A batch is read twice only when one of its samples failed: a long run's
// rare bad samples cost their batches, not the run.

// salvager is implemented by the engines that can read a failed batch
// again for OnErrorSkip (both real engines, through their stages).
type salvager interface {
	// readSample reads sample n of req alone into out, one sample of the
	// engine's output, on the calling goroutine.
	readSample(req *batchReq, n int, out []byte) error
	// writeSlot copies b to the start of slot s, ready for the consumer
	// as an assembled batch is.
	writeSlot(s *slot, b []byte) error
}

// sampleFault reports whether err is about one sample's data, so that
// OnErrorSkip leaves the sample out: its array (or a source's) missing or
// unreadable, of a type or rank that cannot be read, a chunk or shard
// that does not read or decode, a value that does not fit the output. A
// CUDA error, a budget, shutdown and cancellation are not.
func sampleFault(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Kind {
	case ErrNotFound, ErrDtype, ErrRank, ErrStorage, ErrDecode:
		return true
	case ErrInvalid:
		return e.Position != 0
	}
	return false
}

// keepsSlot reports whether a batch that failed with err keeps its slot
// for Pop to salvage.
func (bs *batchState) keepsSlot(err error) bool {
	return bs.skip && sampleFault(err)
}

// attribute names, in an error about a chunk that no sample is named in
// yet, the first sample of the batch that reads those bytes.
func (bs *batchState) attribute(err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Position != 0 || e.Chunk == "" || bs.plan == nil {
		return err
	}
	bp := bs.plan
	for _, c := range bp.copies {
		if c.Job < 0 {
			continue
		}
		j := bp.jobs[c.Job]
		if j.src.uri != e.URI || j.src.rel(j.chunk.Key) != e.Chunk || (e.n > 0 && (j.chunk.Offset+j.chunk.Length <= e.at || e.at+e.n <= j.chunk.Offset)) {
			continue
		}
		if c.Sample < len(bs.req.samples) {
			return sampleError(bs.req, c.Sample, e)
		}
	}
	return err
}

// batchError is the error of a batch taken from every lane: the first
// lane's that failed, naming its source when there are several.
func (p *Pipeline) batchError(rs []*result) error {
	for i, r := range rs {
		if r.err != nil {
			if len(rs) > 1 {
				return sourceError(p.lanes[i].src.Name, r.err)
			}
			return r.err
		}
	}
	return nil
}

// salvageable reports whether Pop may read a batch that failed with err
// again: under OnErrorSkip, when every lane's error is about a sample and
// every lane kept its slot.
func (p *Pipeline) salvageable(rs []*result, err error) bool {
	if p.cfg.OnError != OnErrorSkip || !sampleFault(err) {
		return false
	}
	for i, r := range rs {
		if _, ok := p.lanes[i].eng.(salvager); !ok || r.slot == nil || (r.err != nil && !sampleFault(r.err)) {
			return false
		}
	}
	return true
}

// salvage reads every sample of a failed batch again, one at a time, in
// every source; a sample that fails in any source is left out, and the
// others are written to the lanes' slots, in order. It returns the
// samples left out, or an error that is not about a sample. It runs on
// Pop's goroutine, under popMu.
func (p *Pipeline) salvage(rs []*result) ([]*Error, error) {
	n := len(rs[0].req.samples)
	bufs := make([][]byte, len(rs))
	one := make([][]byte, len(rs))
	for i, r := range rs {
		per := r.slot.bytes(1)
		bufs[i], one[i] = make([]byte, 0, per*int64(n)), make([]byte, per)
	}
	var kept []int
	var skipped []*Error
	for k := range n {
		var bad error
		for i, r := range rs {
			if bad = p.lanes[i].eng.(salvager).readSample(r.req, k, one[i]); bad != nil {
				if len(rs) > 1 {
					bad = sourceError(p.lanes[i].src.Name, bad)
				}
				break
			}
		}
		if bad != nil {
			if !sampleFault(bad) {
				return nil, bad
			}
			var e *Error
			errors.As(bad, &e)
			skipped = append(skipped, e)
			continue
		}
		kept = append(kept, k)
		for i := range rs {
			bufs[i] = append(bufs[i], one[i]...)
		}
	}
	for i, r := range rs {
		if err := p.lanes[i].eng.(salvager).writeSlot(r.slot, bufs[i]); err != nil {
			return nil, err
		}
		r.req, r.err = r.req.only(kept), nil
	}
	return skipped, nil
}

// only returns a copy of r holding only its samples kept (indexes, in
// order), with their positions and transforms (not the samples r left
// out as it was cut: Pop has those).
func (r *batchReq) only(kept []int) *batchReq {
	c := &batchReq{id: r.id, flushAt: r.flushAt, samples: make([]Sample, 0, len(kept)), pos: make([]int64, 0, len(kept))}
	for _, k := range kept {
		c.samples, c.pos = append(c.samples, r.samples[k]), append(c.pos, r.position(k))
		if r.xf != nil {
			c.xf = append(c.xf, r.xf[k])
		}
	}
	return c
}

// sortSkipped orders a batch's skipped samples by position.
func sortSkipped(s []*Error) {
	slices.SortStableFunc(s, func(a, b *Error) int { return cmp.Compare(a.Position, b.Position) })
}

// maxSkipCauses bounds the causes of skipped samples remembered for
// logging each once; past it the memory starts over.
const maxSkipCauses = 1024

// logSkipped warns once per distinct cause of the samples a batch left
// out: the kind of error, and the array, source and chunk at fault (every
// sample of a missing label is one cause, so are the values of one label
// that do not fit its type). It runs under popMu.
func (p *Pipeline) logSkipped(skipped []*Error) {
	for _, e := range skipped {
		key := e.Kind.Error() + "\x00" + e.URI + "\x00" + e.Source + "\x00" + e.Chunk
		if _, ok := p.skipCauses[key]; ok {
			continue
		}
		if len(p.skipCauses) >= maxSkipCauses {
			clear(p.skipCauses)
		}
		p.skipCauses[key] = struct{}{}
		p.cfg.Logger.Warn("damacy: skipped a sample that cannot be read (Config.OnError); further samples with this cause are skipped without a word",
			"error", e.Error())
	}
}

// readSample reads sample n of req alone, on the calling goroutine, the
// way the host engine reads it: its chunks read and decoded on the CPU
// (the whole codec chain) and assembled by the assemble kernel's host
// twin, into out (one sample of the engine's output, which therefore
// equals what the engine would have assembled). Its errors name the
// sample.
func (s *stages) readSample(req *batchReq, n int, out []byte) error {
	one := &batchReq{id: req.id, samples: req.samples[n : n+1], pos: []int64{req.position(n)}}
	if req.xf != nil {
		one.xf = req.xf[n : n+1]
	}
	bp, err := planBatch(s.meta, one, s.cfg.MaxChunkBytes, (*batchVersions)(nil).locator, func(*job) {})
	if err != nil {
		return err
	}
	offs := make([]int64, len(bp.jobs))
	var size int64
	for i, j := range bp.jobs {
		offs[i] = size
		size += align(int64(j.layout.Bytes()) + zarr.DecodeSlack)
	}
	arena := make([]byte, size)
	var stored []byte
	for i, j := range bp.jobs {
		stored = slices.Grow(stored[:0], int(j.chunk.Length))[:j.chunk.Length]
		r := readOp{src: j.src, key: j.chunk.Key, offset: j.chunk.Offset, length: j.chunk.Length}
		if err := s.fds.read(&r, stored); err != nil {
			return sampleError(one, 0, err)
		}
		end := offs[i] + int64(j.layout.Bytes())
		if err := s.decodeJob(j, stored, arena[offs[i]:end:end+zarr.DecodeSlack], nil); err != nil {
			return sampleError(one, 0, decodeError(j, err))
		}
	}
	l := ptx.Layout{Samples: 1, Shape: s.shape, Dtype: s.cfg.Dtype.Kernel()}
	p, err := ptx.NewPlan(l)
	if err != nil {
		return newError("assemble", ErrInvalid, "", err)
	}
	if err := setTransforms(p, one); err != nil {
		return err
	}
	for ci := range bp.copies {
		c := &bp.copies[ci]
		if c.Job < 0 {
			_, err = plan.AddOp(p, c, nil, bp.fills[c.Sample])
		} else {
			src := bp.jobs[c.Job].psrc
			src.Offset = offs[c.Job]
			_, err = plan.AddOp(p, c, &src, 0)
		}
		if err != nil {
			return newError("assemble", ErrInvalid, one.samples[0].URI, err)
		}
	}
	a, err := ptx.NewHostAssembly(out, l, arena, p.Ops(), p.Transforms())
	if err != nil {
		return newError("assemble", ErrInvalid, "", err)
	}
	ops := make([]int32, len(p.Ops()))
	for i := range ops {
		ops[i] = int32(i)
	}
	if err := a.Run(ops, 0, nil, ptx.NewHostScratch()); err != nil {
		return assembleError(err)
	}
	if p.NeedsCheck() {
		return misfitError(one, a.Misfits(), l)
	}
	return nil
}
