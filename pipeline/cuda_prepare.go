package pipeline

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
)

// waveLayout collects what prepare finds about a wave's parts.
type waveLayout struct {
	where map[*job]int64           // decoded bytes' offset from the wave buffer's base
	ents  [plan.Decoders][]nvEntry // the GPU decoders' inputs, by decoder
	end   int64                    // where the parts' reads and slab-decoded chunks end
}

// prepare routes a loaded wave's chunks, decodes those the CPU takes, and
// lays out everything its H2D copy carries. A part's errors are its
// batch's (p.err), the wave's every part's (cw.err).
func (e *cudaEngine) prepare(ctx context.Context, cw *cudaWave) {
	slab := cw.slab.Bytes()
	wl := &waveLayout{where: map[*job]int64{}}
	e.prepareParts(ctx, cw, slab, wl)
	if len(cw.live()) == 0 {
		return
	}
	cw.ents = cw.ents[:0]
	for d, ents := range wl.ents {
		cw.ents = append(cw.ents, ents...)
		cw.ends[d] = len(cw.ents)
	}
	// Where decoded chunks land, as offsets from a wave buffer's base (the
	// arena lies at the same offset in every buffer).
	arenaAt := e.bufs[0].arena
	var arena int64
	for _, en := range cw.ents {
		j := en.job
		wl.where[j] = arenaAt + j.decOff
		arena = max(arena, j.decOff+int64(j.layout.Bytes()))
	}
	if room := e.bufs[0].size - arenaAt - arenaGuard; arena > room {
		cw.err = errorf("plan", ErrBudget, "", "wave layout overflow: %d arena bytes of %d (a planning bug)", arena, room)
		return
	}
	// Room in the chunk cache for what the wave decodes; submit queues the
	// copies, retire publishes the entries once the wave is sound.
	if e.chunks != nil {
		for _, p := range cw.live() {
			bp := p.batch.plan
			for _, ji := range p.jobs {
				j := bp.jobs[ji]
				if j.cacheKey == nil {
					continue
				}
				if en := e.chunks.reserve(*j.cacheKey, j.psrc, int64(j.layout.Bytes())); en != nil {
					cw.inserts = append(cw.inserts, cacheInsert{part: p, job: j, entry: en, src: wl.where[j]})
				}
			}
		}
	}
	// Buffers come back in the order they were taken, so the buffer this
	// wave gets is known before it is free: lay the wave out for it now,
	// while the GPU still works on the buffer's last wave, and take it
	// only then (the CPU work above overlaps the GPU's work too).
	next := e.bufs[e.nextBuf]
	if err := e.layOut(cw, next, slab, wl.end, wl.where); err != nil {
		cw.err = err
		return
	}
	select {
	case cw.buf = <-e.bufFree:
	case <-ctx.Done():
		cw.err = ctx.Err()
		return
	}
	e.nextBuf = (cw.buf.index + 1) % cudaWaveBufs
	if cw.buf != next {
		if err := e.layOut(cw, cw.buf, slab, wl.end, wl.where); err != nil {
			cw.err = err
			return
		}
	}
	cw.buf.uses++
}

// partPrep is one part of a wave between its checks and its CPU
// decoding: its GPU decoders' entries, the chunks the GPU refused (decoded
// into spillBuf, which submit copies to their arena places), and where its
// chunks lie in the wave's CPU decodes ([first, end)).
type partPrep struct {
	p          *wavePart
	ents       [plan.Decoders][]nvEntry
	spill      []*job
	spillBuf   []byte
	first, end int
}

// prepareParts checks and routes the chunks of the wave's live parts and
// decodes those the CPU takes: into the slab where planned so, else into
// a part's spill buffer, from which submit copies them to their arena
// place (cw.spill). The CPU chunks of every part are decoded in one Run
// of the CPU workers, a large one split into tasks as the host engine
// splits it (splitDecode), so that a wave of few large chunks keeps every
// worker busy. A part's errors are its own (p.err); the entries and
// chunks of the others are laid out (wl).
func (e *cudaEngine) prepareParts(ctx context.Context, cw *cudaWave, slab []byte, wl *waveLayout) {
	var preps []partPrep
	var ds []cpuDecode
	for _, p := range cw.live() {
		pp, err := e.routePart(ctx, p, slab, wl, &ds)
		if err != nil {
			p.err = err
			continue
		}
		preps = append(preps, pp)
	}
	errs, runErr := e.decodeAll(ctx, cw.parts[0].wave, ds)
	arenaAt := e.bufs[0].arena
	cw.spill = cw.spill[:0]
	for _, pp := range preps {
		p := pp.p
		for _, err := range errs[pp.first:pp.end] {
			if err != nil && p.err == nil {
				p.err = err
			}
		}
		if p.err == nil && pp.end > pp.first {
			p.err = runErr
		}
		if p.err != nil {
			continue
		}
		for _, j := range pp.spill {
			off, n := j.decOff-p.arenaAt, int64(j.layout.Bytes())
			wl.where[j] = arenaAt + j.decOff
			cw.spill = append(cw.spill, spillCopy{dst: arenaAt + j.decOff, src: pp.spillBuf[off : off+n]})
		}
		for d := range wl.ents {
			wl.ents[d] = append(wl.ents[d], pp.ents[d]...)
		}
		wl.end = max(wl.end, p.slabEnd)
	}
}

// routePart checks and routes the chunks of one part of a loaded wave,
// and appends to ds those the CPU decodes. The checks read the chunks
// nvCOMP may take (checksums, LZ4 sequences), so CPU workers run them in
// parallel; the lists are then built in wave order. Tasks take runs of
// jobs: one task per job costs more in handoffs than a zstd header check.
func (e *cudaEngine) routePart(ctx context.Context, p *wavePart, slab []byte, wl *waveLayout, ds *[]cpuDecode) (partPrep, error) {
	pp := partPrep{p: p}
	w := p.wave
	bp := w.batch.plan
	checks := make([]chunkCheck, len(w.jobs))
	var checked atomic.Int64
	tasks := min(len(w.jobs), 4*e.cpu.Size())
	stored := p.stored(slab)
	t := time.Now()
	err := e.cpu.Run(ctx, tasks, func(k int) error {
		return p.guard(func() error {
			for i := k * len(w.jobs) / tasks; i < (k+1)*len(w.jobs)/tasks; i++ {
				j := bp.jobs[w.jobs[i]]
				c, err := e.check(j, stored(j))
				if err != nil {
					return err
				}
				if j.gpu {
					checked.Add(j.chunk.Length)
				}
				checks[i] = c
			}
			return nil
		})
	}, e.trace.workers("check", "cpu", w, 0))
	e.stats.update(func(st *Stats) { st.Check.add(time.Since(t), checked.Load(), 0) })
	if err != nil {
		return pp, err
	}
	var cpu []*job               // in wave order: decoded into the slab, or (gpu) into spillBuf
	entries, entryBudget := 0, 0 // descriptor entries taken, and reserved by the plan for the part's GPU jobs
	for _, ji := range w.jobs {
		if j := bp.jobs[ji]; j.gpu {
			entryBudget += descEntries(j)
		}
	}
	for i, ji := range w.jobs {
		j, c := bp.jobs[ji], &checks[i]
		if c.inPlace {
			wl.where[j] = c.poff
			continue
		}
		ents := c.ents
		if len(ents) > 0 && entries+len(ents) > entryBudget {
			ents = nil // more streams than the plan reserved room for
			c.cpuPrep(j)
		}
		switch {
		case len(ents) > 0:
			pp.ents[c.dec] = append(pp.ents[c.dec], ents...)
			entries += len(ents)
		case j.gpu:
			j.src.noteSpill()
			pp.spill = append(pp.spill, j)
			cpu = append(cpu, j)
		default:
			wl.where[j] = j.decOff
			cpu = append(cpu, j)
		}
	}
	// CPU-decoded chunks land where the plan put them, in the slab after
	// the part's reads; chunks nvCOMP was to take but refused go to the
	// part's own spill buffer, which submit copies from later.
	var spillEnd int64
	for _, j := range pp.spill {
		spillEnd = max(spillEnd, j.decOff-w.arenaAt+int64(j.layout.Bytes()))
	}
	pp.spillBuf = make([]byte, spillEnd)
	pp.first = len(*ds)
	err = p.guard(func() error {
		for _, j := range cpu {
			n, at, buf := int64(j.layout.Bytes()), j.decOff, slab
			if j.gpu {
				at, buf = j.decOff-w.arenaAt, pp.spillBuf
			}
			d, err := e.splitDecode(w, j, stored(j), buf[at:at+n:at+n])
			if err != nil {
				return err
			}
			*ds = append(*ds, d)
		}
		return nil
	})
	if err != nil {
		*ds = (*ds)[:pp.first]
		return pp, err
	}
	pp.end = len(*ds)
	return pp, nil
}

// layOut writes what the wave's H2D copy carries after its parts' chunks
// (from end in the slab) for wave buffer b: nvCOMP's argument arrays
// (device addresses in b), then each part's assemble ops and blocks; and
// lists the copy. where gives each decoded chunk's offset from a buffer's
// base.
func (e *cudaEngine) layOut(cw *cudaWave, b *waveBuf, slab []byte, end int64, where map[*job]int64) error {
	head := cw.parts[0]
	t := time.Now()
	defer func() {
		e.trace.span(Span{Stage: "layout", Lane: "prepare", Batch: head.batch.req.id, Wave: head.index, Start: t, End: time.Now()})
	}()
	meta := end
	// nvCOMP's argument arrays: ptrs, sizes, out ptrs, capacities, actual
	// sizes, expected sizes (8 bytes each), then statuses; the entries by
	// decoder (cudaWave.ends).
	base := int64(b.base)
	n := int64(len(cw.ents))
	cw.descOff = end
	desc := slab[end : end+n*jobDescBytes]
	for i, en := range cw.ents {
		put := func(k int, v uint64) { binary.LittleEndian.PutUint64(desc[(int64(k)*n+int64(i))*8:], v) }
		put(0, uint64(base+en.in))
		put(1, uint64(en.inLen))
		put(2, uint64(base+where[en.job]+en.out))
		put(3, uint64(en.size))
		put(4, 0)
		put(5, uint64(en.size))
	}
	end += align(n*jobDescBytes + n*statusBytes)
	// The assemble ops, with every source addressed from the buffer base:
	// chunk cache hits too, the cache lying after the wave buffers. The
	// buffer's plans take turns: its last wave's may still be redone.
	toCache := int64(e.cacheAt - b.base)
	for k, p := range cw.live() {
		pl, err := e.partPlan(b, k, len(p.batch.req.samples))
		if err != nil {
			return err
		}
		if _, err := e.assemblePlan(pl, p.wave, func(j *job) int64 {
			if j.hit != nil {
				return toCache + j.hit.off
			}
			return where[j]
		}, nil); err != nil {
			return err
		}
		p.plan, p.at = pl, k
		ops, blocks, xf := ptx.OpBytes(pl.Ops()), ptx.BlockOpBytes(pl.BlockOps()), ptx.TransformBytes(pl.Transforms())
		if end+align(int64(len(ops)))+align(int64(len(blocks)))+int64(len(xf)) > int64(len(slab)) {
			return errorf("plan", ErrBudget, "", "wave layout overflow: %d ops, %d blocks and %d transforms do not fit the %d-byte slab (a planning bug)", len(pl.Ops()), len(pl.BlockOps()), len(pl.Transforms()), len(slab))
		}
		p.opsOff = end
		copy(slab[end:], ops)
		end = align(end + int64(len(ops)))
		p.blkOff = end
		copy(slab[end:], blocks)
		end = align(end + int64(len(blocks)))
		p.xfOff = end
		copy(slab[end:], xf)
		end = align(end + int64(len(xf)))
	}
	if end > int64(len(slab)) {
		return errorf("plan", ErrBudget, "", "wave layout overflow: %d staging bytes of %d (a planning bug)", end, len(slab))
	}
	cw.h2d = cw.h2dCopies(slab, b.base, meta, end)
	return nil
}

// partPlan returns the assemble plan of the k-th live part of the next
// wave to use b, for a batch of n samples. A buffer keeps two sets of
// plans, used in turn: the last wave's may still be redone.
func (e *cudaEngine) partPlan(b *waveBuf, k, n int) (*ptx.Plan, error) {
	set := &b.plans[b.uses%len(b.plans)]
	for len(*set) <= k {
		pl, err := ptx.NewPlan(e.layout)
		if err != nil {
			return nil, newError("assemble", ErrInvalid, "", err)
		}
		*set = append(*set, pl)
	}
	return assemblePlanFor((*set)[k], n)
}
