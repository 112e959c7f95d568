package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/ptx"
)

// submitDecode queues a prepared wave's copy and decoding: H2D on the copy
// stream, nvCOMP, the status reduction and its copy to the host on the
// decode stream, chained by events. It needs no batch slot, so a wave is
// copied and decoded while an earlier one waits for a slot the consumer
// still holds (submitAssemble). Nothing here waits for the GPU.
func (e *cudaEngine) submitDecode(cw *cudaWave) error {
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
			if err := e.decodeS.CopyDtoH(b.sumHost.Bytes()[:ptx.StatusSummarySize], b.summary); err != nil {
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
		return b.dec.Record(e.decodeS)
	})
	if err != nil {
		ce := cudaError("submit", err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	cw.submitted = true
	return nil
}

// submitAssemble queues a decoded wave's assembly on the assemble stream,
// once takeSlots has given its parts their slots: each part but the late
// ones, then the chunk cache's copies, then the buffer's done event.
func (e *cudaEngine) submitAssemble(cw *cudaWave) error {
	b := cw.buf
	err := e.ex.Do(func() error {
		if err := e.asmS.WaitEvent(b.dec); err != nil {
			return err
		}
		if err := b.asmStart.Record(e.asmS); err != nil {
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
		return b.done.Record(e.asmS)
	})
	if err != nil {
		ce := cudaError("submit", err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	return nil
}

// decode queues the GPU decoders' calls over the wave's entries on the
// decode stream, then the reduction of their statuses into the buffer's
// summary: for nvCOMP one batched call per run of entries within the
// decoder's limits (chunks per call, total output); calls on one stream
// run in order, sharing the decoder's temp space; for blosclz one launch
// of the kernel.
func (e *cudaEngine) decode(cw *cudaWave) error {
	b, n := cw.buf, len(cw.ents)
	zs, lz := cw.ends[plan.Zstd], cw.ends[plan.LZ4]
	desc := b.base + cuda.DevicePtr(cw.descOff)
	arr := func(k, from int) cuda.DevicePtr { return desc + cuda.DevicePtr((k*n+from)*8) }
	statuses := desc + cuda.DevicePtr(6*n*8)
	batch := func(from, count, capacity int) *nvcomp.Batch {
		return &nvcomp.Batch{N: count, CompressedPtrs: arr(0, from), CompressedBytes: arr(1, from), OutputPtrs: arr(2, from),
			OutputCapacities: arr(3, from), TotalCapacity: capacity, OutputSizes: arr(4, from), Statuses: statuses + cuda.DevicePtr(4*from)}
	}
	if zs < lz {
		if err := e.kernels.LZ4Check(e.decodeS, arr(0, zs), arr(1, zs), arr(5, zs), lz-zs, e.empty); err != nil {
			return err
		}
	}
	for from := 0; from < lz; {
		d, last := e.zstd, zs
		if from >= zs {
			d, last = e.lz4, lz
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
	if lz < n {
		err := e.kernels.BloscLZ(e.decodeS, ptx.BloscLZArgs{N: n - lz, Ptrs: arr(0, lz), Lens: arr(1, lz), Outs: arr(2, lz), Caps: arr(3, lz),
			Sizes: arr(4, lz), Statuses: statuses + cuda.DevicePtr(4*lz)})
		if err != nil {
			return err
		}
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
		if err := e.awaitConsumers(sl); err != nil {
			return err
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

// awaitConsumers makes the assemble stream wait for the consumer events
// slot sl's next fill must follow (destroying the ones the engine made). It
// runs on the executor.
func (e *cudaEngine) awaitConsumers(sl *slot) error {
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
	return nil
}

// assemble launches part p's assembly from wave buffer b into its batch's
// slot on the assemble stream.
// With an integer output that a source may not fit, the part's misfit
// status is zeroed before and copied to the host after.
func (e *cudaEngine) assemble(b *waveBuf, p *wavePart) error {
	a := ptx.AssembleArgs{Ops: b.base + cuda.DevicePtr(p.opsOff), BlockOps: b.base + cuda.DevicePtr(p.blkOff),
		Arena: b.base, ArenaBytes: e.readable(b), Out: cuda.DevicePtr(p.batch.slot.dev)}
	if p.plan.Transforms() != nil {
		a.Transforms = b.base + cuda.DevicePtr(p.xfOff)
	}
	check := p.plan.NeedsCheck()
	if check {
		a.Misfits = b.summary + cuda.DevicePtr(misfitAt(p))
		if err := e.asmS.MemsetD8(a.Misfits, 0, ptx.MisfitStatusSize); err != nil {
			return err
		}
	}
	if err := e.kernels.Assemble(e.asmS, p.plan, a); err != nil {
		return err
	}
	if check {
		return e.asmS.CopyDtoH(misfitHost(b, p), a.Misfits)
	}
	return nil
}

// misfitAt is where part p's misfit status lies in its buffer's status
// allocation.
func misfitAt(p *wavePart) int64 {
	return ptx.StatusSummarySize + int64(p.at)*ptx.MisfitStatusSize
}

// misfitHost is part p's misfit status in the pinned copy of b's.
func misfitHost(b *waveBuf, p *wavePart) []byte {
	at := misfitAt(p)
	return b.sumHost.Bytes()[at : at+ptx.MisfitStatusSize]
}

// misfits returns the error of part p's values that did not fit its
// integer output, once its assembly has completed (nil: all fit).
func (e *cudaEngine) misfits(b *waveBuf, p *wavePart) error {
	if p.err != nil || p.plan == nil || !p.plan.NeedsCheck() {
		return nil
	}
	ms, err := ptx.DecodeMisfitStatus(misfitHost(b, p))
	if err != nil {
		return newError("assemble", ErrInvalid, "", err)
	}
	return misfitError(p.batch.req, ms, p.plan.Layout())
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
