package pipeline

import (
	"context"
	"errors"
	"slices"

	"github.com/damacy-go/damacy/cuda"
)

// Batch slots on the CUDA engine. A batch takes its slot when the
// assembler (the goroutine after submitDecode) reaches its first wave, in
// order: a wave is copied and decoded without one, so the GPU keeps
// decoding while the consumer still holds the slots (a training loop keeps
// its tensor until the next step). A wave's first part may wait for its
// slot: Pop's caller gives slots back as it pops the batches before. The
// other parts are first waves of batches that joined the wave (see
// stages.planWaves): waiting for their slots could wait on a batch of this
// very wave, which Pop's caller may need before it gives a slot back. So
// they take a free slot or, if none is, the wave goes without them and
// they are assembled late, once slots come back (assembleLate); their
// wave buffer waits for them.

// takeSlots gives the wave's live parts their batches' slots, or lists
// them as late; so too the parts whose batches failed with a sample's
// error under OnErrorSkip, whose slots Pop fills (keepsSlot). It reports
// false when ctx ended.
func (e *cudaEngine) takeSlots(ctx context.Context, cw *cudaWave) bool {
	cw.late = nil
	if cw.err != nil {
		return true
	}
	for _, p := range cw.parts {
		bs := p.batch
		if bs.slot != nil || (p.err != nil && !bs.keepsSlot(p.err)) {
			continue
		}
		if p == cw.parts[0] {
			s, err := e.pool.get(ctx)
			if err != nil {
				return false
			}
			e.hold(bs, s)
			continue
		}
		if len(cw.late) == 0 {
			if s := e.pool.tryGet(); s != nil {
				e.hold(bs, s)
				continue
			}
		}
		cw.late = append(cw.late, p)
		e.lateParts.Add(1)
	}
	return true
}

// assembleLate assembles the late parts of a submitted wave, in order,
// each once its batch's slot is free, then records b.late (b is the
// wave's buffer) and closes the part's lateDone. It runs on the assembler
// goroutine after the wave went on to retire, which emits the batches
// before each part meanwhile: one part at a time, as Pop's caller may
// give back a slot only once it has the batch of the part before. It
// reports false when ctx ended.
func (e *cudaEngine) assembleLate(ctx context.Context, cw *cudaWave, b *waveBuf) bool {
	for i, p := range cw.late {
		if p.batch.slot == nil {
			s, err := e.pool.get(ctx)
			if err != nil {
				for _, q := range cw.late[i:] {
					close(q.lateDone)
				}
				return false
			}
			e.hold(p.batch, s)
		}
		cw.lateMu.Lock()
		if e.sticky.Load() == nil && p.err == nil {
			err := e.ex.Do(func() error {
				if err := e.assembleInto(b, p); err != nil {
					return err
				}
				return b.late.Record(e.asmS)
			})
			if err != nil {
				ce := cudaError("assemble", err)
				e.sticky.CompareAndSwap(nil, ce)
			} else {
				p.lateOK = true
			}
		}
		cw.lateMu.Unlock()
		close(p.lateDone)
	}
	return true
}

// waitLate waits until late part p of wave cw is assembled (retire,
// before it emits p's batch). It reports false when ctx ended.
func (e *cudaEngine) waitLate(ctx context.Context, cw *cudaWave, p *wavePart) bool {
	select {
	case <-p.lateDone:
	case <-ctx.Done():
		return false
	}
	if p.lateOK && cw.err == nil {
		if err := e.wait(cw.lateEv, "assemble"); err != nil {
			cw.err = err
			if errors.Is(err, errStuck) {
				cw.forget()
			}
		}
	}
	return true
}

// assembled reports whether part p's assembly was queued (redo, under
// cw.lateMu).
func (cw *cudaWave) assembled(p *wavePart) bool {
	return p.lateOK || !slices.Contains(cw.late, p)
}

// writeSlot copies b to the start of slot s on the assemble stream, after
// the consumer events the slot waits for, and records the slot's ready
// event after it (salvager).
func (e *cudaEngine) writeSlot(s *slot, b []byte) error {
	err := e.ex.Do(func() error {
		if err := e.awaitConsumers(s); err != nil {
			return err
		}
		if err := e.asmS.CopyHtoD(cuda.DevicePtr(s.dev), b); err != nil {
			return err
		}
		return s.readyEvent.Record(e.asmS)
	})
	if err != nil {
		ce := cudaError("assemble", err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	return nil
}

func (e *cudaEngine) hold(bs *batchState, s *slot) {
	bs.slot = s
	e.holdersMu.Lock()
	if e.holders == nil {
		e.holders = map[*batchState]struct{}{}
	}
	e.holders[bs] = struct{}{}
	e.holdersMu.Unlock()
}

// emit hands a finished batch to Pop (batchState.emit), which takes over
// its slot.
func (e *cudaEngine) emit(ctx context.Context, bs *batchState, out chan<- *result) bool {
	e.holdersMu.Lock()
	delete(e.holders, bs)
	e.holdersMu.Unlock()
	return bs.emit(ctx, out)
}

// dropSlots gives back the slots of batches that were never emitted: run
// stopped (Close) with them in flight. Every stage has returned.
func (e *cudaEngine) dropSlots() {
	e.holdersMu.Lock()
	defer e.holdersMu.Unlock()
	for bs := range e.holders {
		bs.slot.unref()
	}
	e.holders = nil
}
