package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// retire waits for each wave in order on a thread with the context
// current: it frees the slab once its copy is done and the wave buffer once
// the wave is assembled, checks nvCOMP's statuses, and emits each batch
// after its last wave.
func (e *cudaEngine) retire(ctx context.Context, in <-chan *cudaWave, out chan<- *result) {
	unlock, err := cuda.LockThread(e.ex.Context())
	if err != nil {
		e.sticky.CompareAndSwap(nil, cudaError("retire", err))
	} else {
		defer unlock()
	}
	for {
		var cw *cudaWave
		select {
		case cw = <-in:
		case <-ctx.Done():
			return
		}
		if cw == nil {
			return
		}
		if cw.submitted {
			e.finish(ctx, cw)
		}
		if len(cw.late) == 0 {
			e.recycle(cw)
			e.settleCache(cw)
		}
		e.wavesDone.Add(1)
		for _, p := range cw.parts {
			if p.lateDone != nil && !e.waitLate(ctx, cw, p) {
				return
			}
			if p.lateDone != nil && p.lateOK && cw.err == nil && cw.buf != nil && p.err == nil {
				p.err = e.misfits(cw.buf, p)
			}
			bs := p.batch
			for _, err := range []error{cw.err, p.err} {
				if err != nil {
					bs.fail(err)
				}
			}
			if se := e.sticky.Load(); se != nil {
				bs.fail(se)
			}
			if p.last && !e.emit(ctx, bs, out) {
				return
			}
		}
		if len(cw.late) > 0 { // their assembly read the wave buffer and the chunk cache
			e.recycle(cw)
			e.settleCache(cw)
		}
	}
}

// forget drops the wave's slab, buffer and mappings without giving them
// back: the GPU may still use them.
func (cw *cudaWave) forget() {
	cw.slab, cw.buf = nil, nil
	for _, p := range cw.parts {
		p.mapped = nil
	}
}

// finish waits for a submitted wave, records its stage times, and checks
// its chunks' statuses.
func (e *cudaEngine) finish(ctx context.Context, cw *cudaWave) {
	b := cw.buf
	if e.stuck.Load() { // behind a stuck wave: the GPU keeps this one's memory too
		if se := e.sticky.Load(); se != nil {
			cw.err = se
		}
		cw.forget()
		return
	}
	if err := e.wait(b.h2d, "h2d"); err != nil {
		cw.err = err
		if errors.Is(err, errStuck) { // the GPU still owns the slab, the mappings and the buffer
			cw.forget()
			return
		}
	}
	e.slabs <- cw.slab
	cw.slab = nil
	head := cw.parts[0]
	id := head.batch.req.id
	tw := time.Now()
	err := e.wait(b.done, "assemble")
	e.trace.span(Span{Stage: "wait", Lane: "retire", Batch: id, Wave: head.index, Start: tw, End: time.Now()})
	if err != nil {
		cw.err = err
		if errors.Is(err, errStuck) {
			cw.buf = nil
		}
		return
	}
	h2d, _ := cuda.EventElapsedTime(b.start, b.h2d)
	dec, _ := cuda.EventElapsedTime(b.decStart, b.dec)
	asm, _ := cuda.EventElapsedTime(b.asmStart, b.done)
	var in, outB int64
	jobs := 0
	for i, en := range cw.ents {
		in += en.inLen
		outB += en.size
		if i == 0 || cw.ents[i-1].job != en.job {
			jobs++
		}
	}
	elems := int64(0)
	live := cw.live()
	for _, p := range live {
		for _, op := range p.plan.Ops() {
			n := int64(1)
			for d := range len(e.shape) {
				n *= int64(op.Extent[d])
			}
			elems += n
		}
	}
	if e.trace != nil {
		// Place the GPU spans on the host clock: the wave ended (done)
		// about now; the events give each point's distance from start.
		now := time.Now()
		total, _ := cuda.EventElapsedTime(b.start, b.done)
		t0 := now.Add(-total)
		at := func(ev cuda.Event) time.Time { d, _ := cuda.EventElapsedTime(b.start, ev); return t0.Add(d) }
		e.trace.span(Span{Stage: "h2d", Lane: "copy stream", Batch: id, Wave: head.index, Start: t0, End: at(b.h2d), Bytes: cw.copied()})
		e.trace.span(Span{Stage: "decode", Lane: "decode stream", Batch: id, Wave: head.index, Start: at(b.decStart), End: at(b.dec), Bytes: outB})
		e.trace.span(Span{Stage: "assemble", Lane: "assemble stream", Batch: id, Wave: head.index, Start: at(b.asmStart), End: now, Bytes: elems * int64(e.layout.Dtype.Size())})
	}
	e.stats.update(func(s *Stats) {
		s.H2D.add(h2d, cw.copied(), cw.copied())
		if len(cw.ents) > 0 {
			s.Decompress.add(dec, in, outB)
			s.ChunksGPU += int64(jobs)
			s.ChunksDecoded += int64(jobs)
		}
		s.Assemble.add(asm, 0, elems*int64(e.layout.Dtype.Size()))
		s.WavesEmitted++
		if len(live) > 1 {
			s.WavesShared++
		}
	})
	if len(cw.ents) > 0 {
		sum, err := ptx.DecodeStatusSummary(b.sumHost.Bytes()[:ptx.StatusSummarySize])
		if err != nil {
			cw.err = newError("decode", ErrDecode, "", err)
			return
		}
		if sum.Bad > 0 {
			if cw.err = e.redo(ctx, cw, sum); cw.err != nil {
				return
			}
		}
	}
	// The misfit statuses of the parts assembled with the wave (a late
	// part's are read once it is assembled: retire).
	for _, p := range live {
		if !slices.Contains(cw.late, p) {
			if err := e.misfits(b, p); err != nil {
				p.err = err
			}
		}
	}
}

// redo handles a wave whose status summary counts chunks that the GPU did
// not decode (a failed status or a wrong size; an LZ4 block the GPU check
// refused decodes to nothing; a damaged blosclz stream stops). It finds
// them in the per-chunk statuses, reads and decodes them again on the
// CPU, copies them to their places in the arena and assembles the wave's
// parts again, so a chunk that only the GPU cannot decode still gives the
// right data. Refused LZ4 blocks and failed blosclz streams are known to
// have left the rest of the arena alone (every other LZ4 block passed the
// walk; the blosclz kernel bounds its writes); a failed zstd frame may
// have written anywhere in it (nvCOMP does not bound its writes), so then
// every GPU chunk of the wave is decoded again. A chunk the CPU cannot
// decode either is an ErrDecode of its part (the other parts are
// assembled); a CUDA error, the wave's. It runs on the retire thread after
// the wave is done: the wave buffer still holds the wave's assemble ops
// and arena, and the batches' slots are not yet handed out.
func (e *cudaEngine) redo(ctx context.Context, cw *cudaWave, sum ptx.StatusSummary) error {
	cw.lateMu.Lock() // the late parts' assembly waits, or is redone too
	defer cw.lateMu.Unlock()
	b, n := cw.buf, len(cw.ents)
	gpuErr := func(stage string, err error) error {
		ce := cudaError(stage, err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	desc := b.base + cuda.DevicePtr(cw.descOff)
	statuses, actual := make([]byte, 4*n), make([]byte, 8*n)
	if err := cuda.CopyDtoH(statuses, desc+cuda.DevicePtr(6*n*8)); err != nil {
		return gpuErr("decode", err)
	}
	if err := cuda.CopyDtoH(actual, desc+cuda.DevicePtr(4*n*8)); err != nil {
		return gpuErr("decode", err)
	}
	var jobs []*job
	why := map[*job]error{}
	zstdFailed := false
	for i, en := range cw.ents {
		status := nvcomp.Status(int32(binary.NativeEndian.Uint32(statuses[4*i:])))
		size := binary.NativeEndian.Uint64(actual[8*i:])
		if err := nvcomp.CheckChunk(i, status, size, int(en.size)); err != nil && why[en.job] == nil {
			if i >= cw.ends[plan.LZ4] {
				err = fmt.Errorf("blosclz kernel: stream %d of the wave stopped at %d of %d bytes", i, size, en.size)
			}
			why[en.job] = err
			jobs = append(jobs, en.job)
			zstdFailed = zstdFailed || i < cw.ends[plan.Zstd]
			en.job.src.noteSpill() // an array whose chunks keep failing goes to the CPU
		}
	}
	if len(jobs) == 0 {
		return errorf("decode", ErrDecode, "", "%d chunks of the wave failed on the GPU, but their statuses read back clean (status %d, %d bytes of %d)", sum.Bad, sum.Status, sum.Actual, sum.Expected)
	}
	failed := len(jobs)
	if zstdFailed {
		jobs = jobs[:0]
		for i, en := range cw.ents {
			if i == 0 || cw.ents[i-1].job != en.job {
				jobs = append(jobs, en.job)
			}
		}
	}
	partOf := map[*job]*wavePart{}
	for _, p := range cw.live() {
		for _, ji := range p.jobs {
			partOf[p.batch.plan.jobs[ji]] = p
		}
	}
	outs := make([][]byte, len(jobs))
	errs := make([]error, len(jobs))
	e.cpu.Run(ctx, len(jobs), func(k int) error {
		j := jobs[k]
		stored := make([]byte, j.chunk.Length)
		if err := e.fds.read(&readOp{src: j.src, key: j.chunk.Key, offset: j.chunk.Offset, length: j.chunk.Length}, stored); err != nil {
			errs[k] = err
			return nil
		}
		out := make([]byte, j.layout.Bytes())
		if err := e.decodeAgain(j, stored, out); err != nil {
			nv := why[j]
			if nv == nil {
				nv = errors.New("decoded, but another chunk of the wave failed")
			}
			errs[k] = decodeError(j, fmt.Errorf("%w (on the GPU: %v)", err, nv))
			return nil
		}
		outs[k] = out
		return nil
	}, nil)
	if err := ctx.Err(); err != nil {
		return err
	}
	// The chunk cache's copies of these chunks were taken from the arena
	// before this redo: they are written again too.
	cached := map[*job]*cacheEntry{}
	for _, in := range cw.inserts {
		cached[in.job] = in.entry
	}
	for k, j := range jobs {
		if errs[k] != nil {
			p := partOf[j]
			if p == nil {
				return errs[k]
			}
			if p.err == nil {
				p.err = errs[k]
			}
			continue
		}
		if err := cuda.CopyHtoD(b.base+cuda.DevicePtr(b.arena+j.decOff), outs[k]); err != nil {
			return gpuErr("decode", err)
		}
		if en := cached[j]; en != nil {
			if err := cuda.CopyHtoD(e.cacheAt+cuda.DevicePtr(en.off), outs[k]); err != nil {
				return gpuErr("decode", err)
			}
		}
	}
	for _, p := range cw.live() {
		if !cw.assembled(p) {
			continue
		}
		if err := e.assemble(b, p); err != nil {
			return gpuErr("assemble", err)
		}
	}
	if err := e.asmS.Synchronize(); err != nil {
		return gpuErr("assemble", err)
	}
	e.stats.update(func(s *Stats) {
		s.ChunksGPU -= int64(failed)
		s.ChunksRedecoded += int64(len(jobs))
	})
	return nil
}

// settleCache ends a retired wave's use of the chunk cache: the chunks it
// copied in are published if their part came through sound, else their
// room is freed, and the entries it read are unpinned. Behind a stuck
// wave it leaves everything as it is: the GPU may still be at it.
func (e *cudaEngine) settleCache(cw *cudaWave) {
	if e.chunks == nil || e.stuck.Load() {
		return
	}
	for _, in := range cw.inserts {
		if cw.submitted && cw.err == nil && in.part.err == nil {
			e.chunks.publish(in.entry)
		} else {
			e.chunks.drop(in.entry)
		}
	}
	cw.inserts = nil
	for _, p := range cw.parts {
		e.releaseHits(p.wave)
	}
}

// decodeAgain decodes the stored bytes of a chunk nvCOMP did not decode
// into out as nvCOMP would have: a blosc chunk without its unshuffle,
// which the gather undoes.
func (e *cudaEngine) decodeAgain(j *job, stored, out []byte) error {
	var payload []byte
	if j.chunk.Codec.Route().Compression == zarr.CompressionBlosc {
		var err error
		if payload, err = j.chunk.Payload(stored); err != nil {
			return err
		}
	}
	return e.decodeJob(j, stored, out, payload)
}

// waveDeadline bounds the wait for one wave. A wave takes milliseconds;
// nvCOMP can spin forever on some damaged zstd data (its headers call
// corrupt input undefined behaviour), and Pop must not hang on that.
const waveDeadline = time.Minute

// errStuck marks a wave the GPU never finished.
var errStuck = errors.New("the GPU did not finish a wave within " + waveDeadline.String() + " (damaged input to nvCOMP?); the CUDA context is unusable")

// wait blocks until ev has completed, for at most waveDeadline. Any failure
// is sticky: the CUDA context cannot be trusted afterwards.
func (e *cudaEngine) wait(ev cuda.Event, stage string) error {
	done := make(chan error, 1)
	go func() { done <- ev.Synchronize() }()
	var err error
	select {
	case err = <-done:
		if err == nil {
			return nil
		}
		err = cudaError(stage, err)
	case <-time.After(waveDeadline):
		// The goroutine above stays blocked with the GPU.
		e.stuck.Store(true)
		err = newError(stage, ErrCUDA, "", errStuck)
	}
	e.sticky.CompareAndSwap(nil, err.(*Error))
	return err
}
