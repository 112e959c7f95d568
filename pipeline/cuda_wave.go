package pipeline

import (
	"context"
	"sync"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/internal/plan"
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
// batches' first ones (see stages.planWaves), which share its slab,
// arena and nvCOMP calls; each part is assembled into its own batch's
// slot, and fails alone.
type wavePart struct {
	*wave
	plan   *ptx.Plan
	opsOff int64
	blkOff int64
	xfOff  int64 // where the plan's transform table lies in the wave buffer (with transforms)
	at     int   // the part's index among the wave's live parts: its misfit status's place
	err    error // the part's batch's error; a part with one is not decoded or assembled

	lateDone chan struct{} // a late part (cudaWave.late): closed once assembleLate is done with it
	lateOK   bool          // a late part: its assembly was queued
}

// cudaWave is a wave on its way through the CUDA engine.
type cudaWave struct {
	parts     []*wavePart
	slab      *cuda.HostBuffer
	buf       *waveBuf
	h2d       []cuda.HostCopy    // the H2D copies into the wave buffer's staging
	ents      []nvEntry          // the GPU decoders' inputs, by decoder
	ends      [plan.Decoders]int // decoder d's entries are ents[ends[d-1]:ends[d]]
	descOff   int64              // offset of nvCOMP's argument arrays in staging
	spill     []spillCopy        // CPU-decoded chunks that go to the arena by their own copy
	inserts   []cacheInsert      // decoded chunks copied into the chunk cache after assembly
	err       error              // every part's: shutdown, a CUDA error, a planning bug
	submitted bool

	// Parts whose batches found no slot free at assembly (the wave's first
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
	decoded := make(chan *cudaWave, cudaWaveBufs)
	submitted := make(chan *cudaWave, cudaWaveBufs)
	var wg sync.WaitGroup
	wg.Add(5)
	go func() {
		defer wg.Done()
		e.planWaves(ctx, reqs, planned, e.route, true)
	}()
	go func() { // read: gather a wave's parts, read them into a pinned slab
		defer wg.Done()
		defer close(loaded)
		e.readWaves(ctx, planned, loaded)
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
	go func() { // the copy and decode of each wave: no batch slot needed
		defer wg.Done()
		defer close(decoded)
		for cw := range prepared {
			if len(cw.live()) > 0 {
				if err := e.submitDecode(cw); err != nil {
					cw.err = err
				}
			}
			select {
			case decoded <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	go func() { // the assembly of each wave into its batches' slots
		defer wg.Done()
		defer close(submitted)
		for cw := range decoded {
			if !e.takeSlots(ctx, cw) {
				e.recycle(cw)
				return
			}
			if cw.submitted && len(cw.live()) > 0 {
				if err := e.submitAssemble(cw); err != nil {
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

// readWaves gathers the planned waves' parts, reads each wave into a
// pinned slab (load) and passes the waves on in order. A wave that reads
// from an object store is read while the wave before it is still being
// read: its GETs take the lanes that the other's last GETs leave idle (at
// 4 MiB / 16 MiB merged GETs a wave has about 80 of them on 64 lanes).
// The waves read at once are bounded by the slabs, and by a hand-off to
// the forwarder that takes the next wave only once the one before has gone
// on. Local reads keep one wave at a time, as they fill the IO workers.
func (e *cudaEngine) readWaves(ctx context.Context, planned <-chan *wave, loaded chan<- *cudaWave) {
	type reading struct {
		cw   *cudaWave
		read chan struct{} // closed when load is done
		sent chan struct{} // closed when the wave has gone on (or was given back)
	}
	order := make(chan reading)
	var fwd sync.WaitGroup
	fwd.Go(func() { // pass the waves on in the order they were planned
		for r := range order {
			<-r.read
			e.wavesRead.Add(1)
			select {
			case loaded <- r.cw:
			case <-ctx.Done():
				e.recycle(r.cw)
			}
			close(r.sent)
		}
	})
	defer func() {
		close(order)
		fwd.Wait()
	}()
	cw := &cudaWave{}
	for w := range planned {
		cw.parts = append(cw.parts, &wavePart{wave: w})
		if w.joinsNext {
			continue
		}
		r := reading{cw: cw, read: make(chan struct{}), sent: make(chan struct{})}
		remote := cw.remote()
		if remote {
			go func() {
				defer close(r.read)
				e.load(ctx, r.cw, true)
			}()
		} else {
			e.load(ctx, cw, false)
			close(r.read)
		}
		select {
		case order <- r:
		case <-ctx.Done():
			<-r.read
			e.recycle(cw)
			return
		}
		if !remote {
			select {
			case <-r.sent:
			case <-ctx.Done():
				return
			}
		}
		cw = &cudaWave{}
	}
	if len(cw.parts) > 0 { // the wave's next part never came: shutdown
		e.recycle(cw)
	}
}

// remote reports whether any part of the wave reads from an object store.
func (cw *cudaWave) remote() bool {
	for _, p := range cw.parts {
		if hasRemote(p.reads) {
			return true
		}
	}
	return false
}

// load reads a wave's parts into a pinned slab: a remote wave's parts at
// once (their GETs share the lanes), a local wave's one after another. A
// part's errors are its batch's (p.err).
func (e *cudaEngine) load(ctx context.Context, cw *cudaWave, remote bool) {
	for _, p := range cw.parts {
		if err := p.batch.failed(); err != nil {
			p.err = err
		}
	}
	if se := e.sticky.Load(); se != nil {
		cw.err = se
	}
	live := cw.live()
	if len(live) == 0 {
		return
	}
	select {
	case cw.slab = <-e.slabs:
	case <-ctx.Done():
		cw.err = ctx.Err()
		return
	}
	if len(live) > 1 && remote {
		var wg sync.WaitGroup
		for _, p := range live {
			wg.Go(func() { e.loadPart(ctx, cw, p) })
		}
		wg.Wait()
		return
	}
	for _, p := range live {
		e.loadPart(ctx, cw, p)
	}
}

// loadPart reads one part of a wave into the wave's slab.
func (e *cudaEngine) loadPart(ctx context.Context, cw *cudaWave, p *wavePart) {
	reads := p.reads
	if e.maps != nil {
		var err error
		if reads, err = e.mapReads(p.wave); err != nil {
			p.err = err
			return
		}
	}
	if err := e.read(ctx, p.wave, reads, cw.slab.Bytes()); err != nil {
		p.err = err
		return
	}
	if e.maps != nil {
		e.heatUp(reads)
	}
}
