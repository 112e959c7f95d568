package pipeline

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/ptx"
)

// spillCopy is one chunk a CPU worker decoded in place of nvCOMP, to be
// copied to its arena place (dst, from the buffer base).
type spillCopy struct {
	dst int64
	src []byte
}

// cacheInsert is a chunk a wave decodes that goes into the chunk cache:
// from src (an offset from the wave buffer's base) into entry, by a
// device-to-device copy after the wave's assembly.
type cacheInsert struct {
	part  *wavePart
	job   *job
	entry *cacheEntry
	src   int64
}

// wavePart is one batch's share of a CUDA wave: one wave of the batch's
// plan. A wave carries one part, or a batch's last wave and the next
// batches' first ones (see stages.plan), which share its slab, arena and
// nvCOMP calls; each part is assembled into its own batch's slot, and
// fails alone.
type wavePart struct {
	*wave
	mapped []*fileMap // per read: the mapped file it is copied from (nil: preads into the slab); nil when none is
	plan   *ptx.Plan
	opsOff int64
	blkOff int64
	err    error // the part's batch's error; a part with one is not decoded or assembled

	lateDone chan struct{} // a late part (cudaWave.late): closed once assembleLate is done with it
	lateOK   bool          // a late part: its assembly was queued
}

// cudaWave is a wave on its way through the CUDA engine.
type cudaWave struct {
	parts     []*wavePart
	slab      *cuda.HostBuffer
	buf       *waveBuf
	h2d       []cuda.HostCopy // the H2D copies into the wave buffer's staging
	ents      []nvEntry       // nvCOMP's inputs: zstd first, then LZ4
	nZstd     int
	descOff   int64         // offset of nvCOMP's argument arrays in staging
	spill     []spillCopy   // CPU-decoded chunks that go to the arena by their own copy
	inserts   []cacheInsert // decoded chunks copied into the chunk cache after assembly
	err       error         // every part's: shutdown, a CUDA error, a planning bug
	submitted bool

	// Parts whose batches found no slot free at submit (the wave's first
	// part waits for one; the others must not): assembled once their
	// slots come (assembleLate), before the wave's buffer is given back.
	late   []*wavePart
	lateEv cuda.Event // recorded after each late part's assembly
	lateMu sync.Mutex // orders their assembly with redo's
}

// live returns the parts to decode and assemble: all, but those with an
// error, and none when the wave has one.
func (cw *cudaWave) live() []*wavePart {
	if cw.err != nil {
		return nil
	}
	var out []*wavePart
	for _, p := range cw.parts {
		if p.err == nil {
			out = append(out, p)
		}
	}
	return out
}

// headStage reports whether the oldest wave not yet retired is still
// being read (stageIO) or is past its reads: checks, CPU decode, the GPU.
// Waves are read and retired in the same order.
func (e *cudaEngine) headStage() stage {
	if e.wavesRead.Load() > e.wavesDone.Load() {
		return stageCompute
	}
	return stageIO
}

func (e *cudaEngine) run(ctx context.Context, reqs <-chan *batchReq, out chan<- *result) {
	planned := make(chan *wave, 4)
	loaded := make(chan *cudaWave, 1)
	prepared := make(chan *cudaWave, 1)
	submitted := make(chan *cudaWave, cudaWaveBufs)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		e.plan(ctx, reqs, planned, e.route, true)
	}()
	go func() { // read: gather a wave's parts, pread into a pinned slab
		defer wg.Done()
		defer close(loaded)
		cw := &cudaWave{}
		for w := range planned {
			cw.parts = append(cw.parts, &wavePart{wave: w})
			if w.joinsNext {
				continue
			}
			e.load(ctx, cw)
			e.wavesRead.Add(1)
			select {
			case loaded <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
			cw = &cudaWave{}
		}
		if len(cw.parts) > 0 { // the wave's next part never came: shutdown
			e.recycle(cw)
		}
	}()
	go func() { // route, CPU-decode, lay out the H2D copy
		defer wg.Done()
		defer close(prepared)
		for cw := range loaded {
			if len(cw.live()) > 0 {
				e.prepare(ctx, cw)
			}
			select {
			case prepared <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer close(submitted)
		for cw := range prepared {
			if !e.takeSlots(ctx, cw) {
				e.recycle(cw)
				return
			}
			if len(cw.live()) > 0 {
				if err := e.submit(cw); err != nil {
					cw.err = err
				}
			}
			if cw.err != nil || !cw.submitted {
				cw.late = nil
			}
			b := cw.buf // retire may drop it (a stuck GPU)
			if len(cw.late) > 0 {
				cw.lateEv = b.late
			}
			for _, p := range cw.late {
				p.lateDone = make(chan struct{})
			}
			select {
			case submitted <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
			if len(cw.late) > 0 && !e.assembleLate(ctx, cw, b) {
				return
			}
		}
	}()
	e.retire(ctx, submitted, out)
	wg.Wait()
	e.dropSlots()
}

// recycle gives a wave's slab, wave buffer and mappings back (once the GPU
// is done with them, or when they were never used).
func (e *cudaEngine) recycle(cw *cudaWave) {
	e.releaseMaps(cw)
	if cw.slab != nil {
		e.slabs <- cw.slab
		cw.slab = nil
	}
	if cw.buf != nil {
		e.bufFree <- cw.buf
		cw.buf = nil
	}
}

// load reads a wave's parts into a pinned slab. A part's errors are its
// batch's (p.err).
func (e *cudaEngine) load(ctx context.Context, cw *cudaWave) {
	for _, p := range cw.parts {
		if err := p.batch.failed(); err != nil {
			p.err = err
		}
	}
	if se := e.sticky.Load(); se != nil {
		cw.err = se
	}
	if len(cw.live()) == 0 {
		return
	}
	select {
	case cw.slab = <-e.slabs:
	case <-ctx.Done():
		cw.err = ctx.Err()
		return
	}
	for _, p := range cw.live() {
		reads := p.reads
		if e.maps != nil {
			var err error
			if reads, err = e.mapReads(p); err != nil {
				p.err = err
				continue
			}
		}
		if err := e.read(ctx, p.wave, reads, cw.slab.Bytes()); err != nil {
			p.err = err
			continue
		}
		if e.maps != nil {
			e.heatUp(reads)
		}
	}
}

// waveLayout collects what prepare finds about a wave's parts.
type waveLayout struct {
	where     map[*job]int64 // decoded bytes' offset from the wave buffer's base
	zstd, lz4 []nvEntry
	cpuBytes  int64 // decoded by CPU workers into the slab
	cpuTime   time.Duration
	end       int64 // where the parts' reads and slab-decoded chunks end
}

// prepare routes a loaded wave's chunks, decodes those the CPU takes, and
// lays out everything its H2D copy carries. A part's errors are its
// batch's (p.err), the wave's every part's (cw.err).
func (e *cudaEngine) prepare(ctx context.Context, cw *cudaWave) {
	slab := cw.slab.Bytes()
	wl := &waveLayout{where: map[*job]int64{}}
	cw.spill = cw.spill[:0]
	for _, p := range cw.live() {
		if err := e.preparePart(ctx, cw, p, slab, wl); err != nil {
			p.err = err
		}
	}
	if len(cw.live()) == 0 {
		return
	}
	e.split.cpuDone(wl.cpuBytes, wl.cpuTime)
	cw.ents = append(wl.zstd, wl.lz4...)
	cw.nZstd = len(wl.zstd)
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
	t := time.Now()
	select {
	case cw.buf = <-e.bufFree:
	case <-ctx.Done():
		cw.err = ctx.Err()
		return
	}
	e.split.waited(time.Since(t))
	e.nextBuf = (cw.buf.index + 1) % cudaWaveBufs
	if cw.buf != next {
		if err := e.layOut(cw, cw.buf, slab, wl.end, wl.where); err != nil {
			cw.err = err
			return
		}
	}
	cw.buf.uses++
}

// preparePart checks and routes the chunks of one part of a loaded wave
// and decodes those the CPU takes: into the slab where planned so, else
// into a spill buffer, from which submit copies them to their arena place.
// The checks read the chunks nvCOMP may take (checksums, LZ4 sequences),
// so CPU workers run them in parallel; the lists are then built in wave
// order. Tasks take runs of jobs: one task per job costs more in handoffs
// than a zstd header check.
func (e *cudaEngine) preparePart(ctx context.Context, cw *cudaWave, p *wavePart, slab []byte, wl *waveLayout) error {
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
		return err
	}
	var cpu, spill []*job
	var zstdEnts, lz4Ents []nvEntry
	entryBudget := 0 // descriptor entries the plan reserved for the part's GPU jobs
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
		if len(ents) > 0 && len(zstdEnts)+len(lz4Ents)+len(ents) > entryBudget {
			ents = nil // more streams than the plan reserved room for
			c.cpuPrep(j)
		}
		switch {
		case len(ents) > 0 && c.zstd:
			zstdEnts = append(zstdEnts, ents...)
		case len(ents) > 0:
			lz4Ents = append(lz4Ents, ents...)
		case j.gpu:
			j.src.noteSpill()
			spill = append(spill, j)
		default:
			cpu = append(cpu, j)
		}
	}
	// CPU-decoded chunks land where the plan put them, in the slab after
	// the part's reads; chunks nvCOMP was to take but refused go to the
	// part's own spill buffer, which submit copies from later.
	var spillEnd int64
	for _, j := range spill {
		spillEnd = max(spillEnd, j.decOff-w.arenaAt+int64(j.layout.Bytes()))
	}
	spillBuf := make([]byte, spillEnd)
	dst := make(map[*job][]byte, len(cpu)+len(spill))
	for _, j := range cpu {
		off, n := j.decOff, int64(j.layout.Bytes())
		wl.where[j] = off
		dst[j] = slab[off : off+n : off+n]
	}
	for _, j := range spill {
		off, n := j.decOff-w.arenaAt, int64(j.layout.Bytes())
		dst[j] = spillBuf[off : off+n : off+n]
	}
	t = time.Now()
	err = p.guard(func() error {
		return e.decodeCPU(ctx, w, stored, func(j *job) bool { return dst[j] != nil }, func(j *job) []byte { return dst[j] })
	})
	if err != nil {
		return err
	}
	for _, j := range cpu {
		wl.cpuBytes += int64(j.layout.Bytes())
	}
	wl.cpuTime += time.Since(t)
	arenaAt := e.bufs[0].arena
	for _, j := range spill {
		off := j.decOff - w.arenaAt
		wl.where[j] = arenaAt + j.decOff
		cw.spill = append(cw.spill, spillCopy{dst: arenaAt + j.decOff, src: spillBuf[off : off+int64(j.layout.Bytes())]})
	}
	wl.zstd = append(wl.zstd, zstdEnts...)
	wl.lz4 = append(wl.lz4, lz4Ents...)
	wl.end = max(wl.end, w.slabEnd)
	return nil
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
	// sizes, expected sizes (8 bytes each), then statuses; zstd entries
	// first, then LZ4.
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
		}); err != nil {
			return err
		}
		p.plan = pl
		ops, blocks := ptx.OpBytes(pl.Ops()), ptx.BlockOpBytes(pl.BlockOps())
		if end+align(int64(len(ops)))+int64(len(blocks)) > int64(len(slab)) {
			return errorf("plan", ErrBudget, "", "wave layout overflow: %d ops and %d blocks do not fit the %d-byte slab (a planning bug)", len(pl.Ops()), len(pl.BlockOps()), len(slab))
		}
		p.opsOff = end
		copy(slab[end:], ops)
		end = align(end + int64(len(ops)))
		p.blkOff = end
		copy(slab[end:], blocks)
		end = align(end + int64(len(blocks)))
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
	return planFor((*set)[k], n)
}

// submit queues a prepared wave on the GPU: H2D on the copy stream, nvCOMP
// and the status reduction on the decode stream, each part's assembly on
// the assemble stream, chained by events. Nothing here waits for the GPU.
func (e *cudaEngine) submit(cw *cudaWave) error {
	b := cw.buf
	n := len(cw.ents)
	head := cw.parts[0]
	t := time.Now()
	defer func() {
		e.trace.span(Span{Stage: "submit", Lane: "submit", Batch: head.batch.req.id, Wave: head.index, Start: t, End: time.Now()})
	}()
	err := e.ex.Do(func() error {
		if err := b.start.Record(e.copyS); err != nil {
			return err
		}
		if err := e.copyS.CopyHtoDBatch(cw.h2d); err != nil {
			return err
		}
		if err := b.h2d.Record(e.copyS); err != nil {
			return err
		}
		if err := e.decodeS.WaitEvent(b.h2d); err != nil {
			return err
		}
		if err := b.decStart.Record(e.decodeS); err != nil {
			return err
		}
		if n > 0 {
			if err := e.decode(cw); err != nil {
				return err
			}
		}
		for _, c := range cw.spill {
			// From pageable memory: the driver stages the bytes before
			// returning, so the spill buffer is free again afterwards.
			if err := e.decodeS.CopyHtoD(b.base+cuda.DevicePtr(c.dst), c.src); err != nil {
				return err
			}
		}
		if err := b.dec.Record(e.decodeS); err != nil {
			return err
		}
		if err := e.asmS.WaitEvent(b.dec); err != nil {
			return err
		}
		for _, p := range cw.live() {
			if slices.Contains(cw.late, p) {
				continue
			}
			if err := e.assembleInto(b, p); err != nil {
				return err
			}
		}
		for _, c := range cacheCopies(cw.inserts) {
			if err := e.asmS.CopyDtoD(e.cacheAt+cuda.DevicePtr(c.dst), b.base+cuda.DevicePtr(c.src), int(c.n)); err != nil {
				return err
			}
		}
		if n > 0 {
			if err := e.asmS.CopyDtoH(b.sumHost.Bytes(), b.summary); err != nil {
				return err
			}
		}
		return b.done.Record(e.asmS)
	})
	if err != nil {
		ce := cudaError("submit", err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	cw.submitted = true
	return nil
}

// decode queues nvCOMP's calls over the wave's entries on the decode
// stream, then the reduction of their statuses into the buffer's summary:
// one batched call per run of entries within the decoder's limits (chunks
// per call, total output); calls on one stream run in order, sharing the
// decoder's temp space.
func (e *cudaEngine) decode(cw *cudaWave) error {
	b, n := cw.buf, len(cw.ents)
	desc := b.base + cuda.DevicePtr(cw.descOff)
	arr := func(k, from int) cuda.DevicePtr { return desc + cuda.DevicePtr((k*n+from)*8) }
	statuses := desc + cuda.DevicePtr(6*n*8)
	batch := func(from, count, capacity int) *nvcomp.Batch {
		return &nvcomp.Batch{N: count, CompressedPtrs: arr(0, from), CompressedBytes: arr(1, from), OutputPtrs: arr(2, from),
			OutputCapacities: arr(3, from), TotalCapacity: capacity, OutputSizes: arr(4, from), Statuses: statuses + cuda.DevicePtr(4*from)}
	}
	if cw.nZstd < n {
		if err := e.kernels.LZ4Check(e.decodeS, arr(0, cw.nZstd), arr(1, cw.nZstd), arr(5, cw.nZstd), n-cw.nZstd, e.empty); err != nil {
			return err
		}
	}
	for from := 0; from < n; {
		d := e.zstd
		last := cw.nZstd
		if from >= cw.nZstd {
			d, last = e.lz4, n
		}
		cfg := d.Config()
		to, total := from, 0
		for to < last && to-from < cfg.MaxChunks && total+int(cw.ents[to].size) <= cfg.MaxTotalBytes {
			total += int(cw.ents[to].size)
			to++
		}
		if to == from {
			return fmt.Errorf("nvcomp: entry of %d bytes exceeds the decoder's %d", cw.ents[from].size, cfg.MaxTotalBytes)
		}
		if err := d.Decode(e.decodeS, batch(from, to-from, total)); err != nil {
			return err
		}
		from = to
	}
	return e.kernels.ReduceStatus(e.decodeS, statuses, arr(4, 0), arr(5, 0), n, b.summary)
}

// assembleInto queues part p's assembly into its batch's slot on the
// assemble stream: after the consumer's events on the slot when p is its
// batch's first wave, and the slot's ready event after it when p is the
// last. It runs on the executor.
func (e *cudaEngine) assembleInto(b *waveBuf, p *wavePart) error {
	sl := p.batch.slot
	if p.index == 0 {
		for _, a := range sl.takeAfter() {
			if err := e.asmS.WaitEvent(a.ev); err != nil {
				return err
			}
			if a.own {
				if err := a.ev.Destroy(); err != nil {
					return err
				}
			}
		}
	}
	if err := e.assemble(b, p); err != nil {
		return err
	}
	if p.last {
		return sl.readyEvent.Record(e.asmS)
	}
	return nil
}

// assemble launches part p's assembly from wave buffer b into its batch's
// slot on the assemble stream.
func (e *cudaEngine) assemble(b *waveBuf, p *wavePart) error {
	ops, blocks := b.base+cuda.DevicePtr(p.opsOff), b.base+cuda.DevicePtr(p.blkOff)
	return e.kernels.Assemble(e.asmS, p.plan, ops, blocks, b.base, e.readable(b), cuda.DevicePtr(p.batch.slot.dev))
}

// readable is how many bytes from b's base the assemble kernel may read:
// the rest of the allocation, the chunk cache included.
func (e *cudaEngine) readable(b *waveBuf) int64 { return int64(e.memEnd - b.base) }

// deviceCopy is one device-to-device copy: n bytes from src (from a wave
// buffer's base) to dst (from the chunk cache's).
type deviceCopy struct{ src, dst, n int64 }

// cacheCopies merges the copies of inserts whose sources and entries both
// follow one another (the arena's chunks, into a cache with room at its
// end), so that a wave takes a few copies rather than one per chunk. A
// merged copy also moves the padding between the chunks, which lies in
// the padding of their entries.
func cacheCopies(inserts []cacheInsert) []deviceCopy {
	ins := slices.Clone(inserts)
	slices.SortFunc(ins, func(a, b cacheInsert) int { return cmp.Compare(a.src, b.src) })
	var out []deviceCopy
	for i, in := range ins {
		n := int64(in.job.layout.Bytes())
		if i > 0 {
			prev := &ins[i-1]
			if prev.src+prev.entry.size == in.src && prev.entry.off+prev.entry.size == in.entry.off {
				last := &out[len(out)-1]
				last.n = in.src + n - last.src
				continue
			}
		}
		out = append(out, deviceCopy{src: in.src, dst: in.entry.off, n: n})
	}
	return out
}
