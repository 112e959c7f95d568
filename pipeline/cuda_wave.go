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
	job   *job
	entry *cacheEntry
	src   int64
}

// cudaWave is a wave on its way through the CUDA engine.
type cudaWave struct {
	*wave
	slab      *cuda.HostBuffer
	mapped    []*fileMap // per read: the mapped file it is copied from (nil: preads into the slab); nil when none is
	buf       *waveBuf
	h2d       []cuda.HostCopy // the H2D copies into the wave buffer's staging
	ents      []nvEntry       // nvCOMP's inputs: zstd first, then LZ4
	nZstd     int
	descOff   int64 // offset of nvCOMP's argument arrays in staging
	plan      *ptx.Plan
	opsOff    int64
	blkOff    int64
	spill     []spillCopy   // CPU-decoded chunks that go to the arena by their own copy
	inserts   []cacheInsert // decoded chunks copied into the chunk cache after assembly
	err       error
	submitted bool
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
		e.plan(ctx, reqs, planned, e.route)
	}()
	go func() { // read: preads into a pinned slab
		defer wg.Done()
		defer close(loaded)
		for w := range planned {
			cw := &cudaWave{wave: w}
			if w.batch.failed() == nil && e.sticky.Load() == nil {
				e.load(ctx, cw)
			}
			e.wavesRead.Add(1)
			select {
			case loaded <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	go func() { // route, CPU-decode, lay out the H2D copy
		defer wg.Done()
		defer close(prepared)
		for cw := range loaded {
			if cw.err == nil && cw.batch.failed() == nil && e.sticky.Load() == nil {
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
			bs := cw.batch
			if cw.err == nil && bs.failed() == nil && bs.slot == nil {
				s, err := e.pool.get(ctx)
				if err != nil {
					e.recycle(cw)
					return
				}
				bs.slot = s
			}
			if cw.err == nil && bs.failed() == nil {
				if err := e.submit(cw); err != nil {
					cw.err = err
				}
			}
			select {
			case submitted <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	e.retire(ctx, submitted, out)
	wg.Wait()
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

// load reads a wave into a pinned slab. Errors are the batch's (cw.err).
func (e *cudaEngine) load(ctx context.Context, cw *cudaWave) {
	select {
	case cw.slab = <-e.slabs:
	case <-ctx.Done():
		cw.err = ctx.Err()
		return
	}
	reads := cw.reads
	if e.maps != nil {
		var err error
		if reads, err = e.mapReads(cw); err != nil {
			cw.err = err
			return
		}
	}
	if err := e.read(ctx, cw.wave, reads, cw.slab.Bytes()); err != nil {
		cw.err = err
		return
	}
	if e.maps != nil {
		e.heatUp(reads)
	}
}

// prepare routes a loaded wave's chunks, decodes those the CPU takes, and
// lays out everything its H2D copy carries. Errors are the batch's
// (cw.err).
func (e *cudaEngine) prepare(ctx context.Context, cw *cudaWave) {
	w := cw.wave
	fail := func(err error) { cw.err = err }
	slab := cw.slab.Bytes()
	bp := w.batch.plan
	end := int64(0)
	for _, r := range w.reads {
		end = max(end, align(r.slabOff+r.length))
	}
	meta := end // what the wave adds to its reads starts here
	// Final routing, now that the bytes are here (see check); the chunks
	// nvCOMP does not take are decoded on the CPU, into the slab when
	// planned so, else into the spill buffer, from which submit copies
	// them to their arena place. The checks read the chunks nvCOMP may
	// take (checksums, LZ4 sequences), so CPU workers run them in
	// parallel; the lists are then built in wave order.
	// Tasks take runs of jobs: one task per job costs more in handoffs
	// than a zstd header check.
	checks := make([]chunkCheck, len(w.jobs))
	var checked atomic.Int64
	tasks := min(len(w.jobs), 4*e.cpu.Size())
	stored := cw.stored(slab)
	t := time.Now()
	err := e.cpu.Run(ctx, tasks, func(k int) error {
		return cw.guard(func() error {
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
		fail(err)
		return
	}
	var cpu, spill []*job
	where := map[*job]int64{} // decoded bytes' offset from the wave buffer's base
	var zstdEnts, lz4Ents []nvEntry
	entryBudget := 0 // descriptor entries the plan reserved for the wave's GPU jobs
	for _, ji := range w.jobs {
		if j := bp.jobs[ji]; j.gpu {
			entryBudget += descEntries(j)
		}
	}
	for i, ji := range w.jobs {
		j, c := bp.jobs[ji], &checks[i]
		if c.inPlace {
			where[j] = c.poff
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
	// CPU-decoded chunks land after the reads.
	for _, j := range cpu {
		where[j] = end
		end += align(int64(j.layout.Bytes()))
	}
	// The spill buffer is the wave's own: submit copies from it later.
	var spillEnd int64
	for _, j := range spill {
		spillEnd = max(spillEnd, j.decOff+int64(j.layout.Bytes()))
	}
	spillBuf := make([]byte, spillEnd)
	dst := make(map[*job][]byte, len(cpu)+len(spill))
	for _, j := range cpu {
		off, n := where[j], int64(j.layout.Bytes())
		dst[j] = slab[off : off+n : off+n]
	}
	for _, j := range spill {
		off, n := j.decOff, int64(j.layout.Bytes())
		dst[j] = spillBuf[off : off+n : off+n]
	}
	t = time.Now()
	err = cw.guard(func() error {
		return e.decodeCPU(ctx, w, stored, func(j *job) bool { return dst[j] != nil }, func(j *job) []byte { return dst[j] })
	})
	if err != nil {
		fail(err)
		return
	}
	var cpuBytes int64
	for _, j := range cpu {
		cpuBytes += int64(j.layout.Bytes())
	}
	e.split.cpuDone(cpuBytes, time.Since(t))
	// Where decoded chunks land, as offsets from a wave buffer's base (the
	// arena lies at the same offset in every buffer).
	arenaAt := e.bufs[0].arena
	cw.spill = cw.spill[:0]
	for _, j := range spill {
		where[j] = arenaAt + j.decOff
		cw.spill = append(cw.spill, spillCopy{dst: arenaAt + j.decOff, src: spillBuf[j.decOff : j.decOff+int64(j.layout.Bytes())]})
	}
	cw.ents = append(zstdEnts, lz4Ents...)
	cw.nZstd = len(zstdEnts)
	var arena int64
	for _, en := range cw.ents {
		j := en.job
		where[j] = arenaAt + j.decOff
		arena = max(arena, j.decOff+int64(j.layout.Bytes()))
	}
	if room := e.bufs[0].size - arenaAt - arenaGuard; arena > room {
		fail(errorf("plan", ErrBudget, "", "wave layout overflow: %d arena bytes of %d (a planning bug)", arena, room))
		return
	}
	// Room in the chunk cache for what the wave decodes; submit queues the
	// copies, retire publishes the entries once the wave is sound.
	if e.chunks != nil {
		for _, ji := range w.jobs {
			j := bp.jobs[ji]
			if j.cacheKey == nil {
				continue
			}
			if en := e.chunks.reserve(*j.cacheKey, j.psrc, int64(j.layout.Bytes())); en != nil {
				cw.inserts = append(cw.inserts, cacheInsert{job: j, entry: en, src: where[j]})
			}
		}
	}
	// Buffers come back in the order they were taken, so the buffer this
	// wave gets is known before it is free: lay the wave out for it now,
	// while the GPU still works on the buffer's last wave, and take it
	// only then (the CPU work above overlaps the GPU's work too).
	next := e.bufs[e.nextBuf]
	if err := e.layOut(cw, next, slab, meta, end, where); err != nil {
		fail(err)
		return
	}
	t = time.Now()
	select {
	case cw.buf = <-e.bufFree:
	case <-ctx.Done():
		fail(ctx.Err())
		return
	}
	e.split.waited(time.Since(t))
	e.nextBuf = (cw.buf.index + 1) % cudaWaveBufs
	if cw.buf != next {
		if err := e.layOut(cw, cw.buf, slab, meta, end, where); err != nil {
			fail(err)
			return
		}
	}
	cw.buf.uses++
}

// layOut writes what the wave's H2D copy carries after the chunks (from
// end in the slab) for wave buffer b: nvCOMP's argument arrays (device
// addresses in b), then the assemble ops and blocks; and lists the copy.
// where gives each decoded chunk's offset from a buffer's base.
func (e *cudaEngine) layOut(cw *cudaWave, b *waveBuf, slab []byte, meta, end int64, where map[*job]int64) error {
	w := cw.wave
	t := time.Now()
	defer func() {
		e.trace.span(Span{Stage: "layout", Lane: "prepare", Batch: w.batch.req.id, Wave: w.index, Start: t, End: time.Now()})
	}()
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
	p, err := planFor(b.plans[b.uses%len(b.plans)], len(w.batch.req.samples))
	if err != nil {
		return err
	}
	if _, err := e.assemblePlan(p, w, func(j *job) int64 {
		if j.hit != nil {
			return toCache + j.hit.off
		}
		return where[j]
	}); err != nil {
		return err
	}
	cw.plan = p
	ops, blocks := ptx.OpBytes(p.Ops()), ptx.BlockOpBytes(p.BlockOps())
	if end+align(int64(len(ops)))+int64(len(blocks)) > int64(len(slab)) {
		return errorf("plan", ErrBudget, "", "wave layout overflow: %d ops and %d blocks do not fit the %d-byte slab (a planning bug)", len(p.Ops()), len(p.BlockOps()), len(slab))
	}
	cw.opsOff = end
	copy(slab[end:], ops)
	end = align(end + int64(len(ops)))
	cw.blkOff = end
	copy(slab[end:], blocks)
	end = align(end + int64(len(blocks)))
	if end > int64(len(slab)) {
		return errorf("plan", ErrBudget, "", "wave layout overflow: %d staging bytes of %d (a planning bug)", end, len(slab))
	}
	cw.h2d = cw.h2dCopies(slab, b.base, meta, end)
	return nil
}

// submit queues a prepared wave on the GPU: H2D on the copy stream, nvCOMP
// and the status reduction on the decode stream, assembly on the assemble
// stream, chained by events. Nothing here waits for the GPU.
func (e *cudaEngine) submit(cw *cudaWave) error {
	b, sl := cw.buf, cw.batch.slot
	n := len(cw.ents)
	first := cw.index == 0
	t := time.Now()
	defer func() {
		e.trace.span(Span{Stage: "submit", Lane: "submit", Batch: cw.batch.req.id, Wave: cw.index, Start: t, End: time.Now()})
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
			desc := b.base + cuda.DevicePtr(cw.descOff)
			arr := func(k, from int) cuda.DevicePtr { return desc + cuda.DevicePtr((k*n+from)*8) }
			statuses := desc + cuda.DevicePtr(6*n*8)
			batch := func(from, count, capacity int) *nvcomp.Batch {
				return &nvcomp.Batch{N: count, CompressedPtrs: arr(0, from), CompressedBytes: arr(1, from), OutputPtrs: arr(2, from),
					OutputCapacities: arr(3, from), TotalCapacity: capacity, OutputSizes: arr(4, from), Statuses: statuses + cuda.DevicePtr(4*from)}
			}
			// One batched call per run of entries within the decoder's
			// limits (chunks per call, total output); calls on one stream
			// run in order, sharing the decoder's temp space.
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
			if err := e.kernels.ReduceStatus(e.decodeS, statuses, arr(4, 0), arr(5, 0), n, b.summary); err != nil {
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
		if first {
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
		ops, blocks := b.base+cuda.DevicePtr(cw.opsOff), b.base+cuda.DevicePtr(cw.blkOff)
		if err := e.kernels.Assemble(e.asmS, cw.plan, ops, blocks, b.base, e.readable(b), cuda.DevicePtr(sl.dev)); err != nil {
			return err
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
		if err := b.done.Record(e.asmS); err != nil {
			return err
		}
		if cw.last {
			return sl.readyEvent.Record(e.asmS)
		}
		return nil
	})
	if err != nil {
		ce := cudaError("submit", err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	cw.submitted = true
	return nil
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
