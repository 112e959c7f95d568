package serve

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/remote"
)

// pop queues a pop for the popper, or answers AGAIN at once when no batch
// can complete for it: the batches that pushes and flushes made complete
// are all taken by the pops before it.
func (s *server) pop(id int64) {
	var err error
	s.mu.Lock()
	switch {
	case s.formed <= s.claimed:
		err = statusErrorf(statusAgain, "pop: no batch can complete: %d sample(s) in flight, batch_size %d, no flush; push more or flush", s.partial, s.batchSize)
	case len(s.pops) == cap(s.pops):
		err = statusErrorf(statusAgain, "pop: %d pops are waiting already", cap(s.pops))
	default:
		s.pops <- id // only this goroutine sends: there is room
		s.claimed++
	}
	s.mu.Unlock()
	if err != nil {
		s.fail(id, "pop", err, nil)
	}
}

// popper answers pop requests in order, one Pop at a time, so that the
// main loop keeps reading (releases, close) while a Pop blocks. When ctx
// ends it answers every pop left with SHUTDOWN.
func (s *server) popper(ctx context.Context) {
	defer close(s.popDone)
	for id := range s.pops {
		if ctx.Err() != nil {
			s.fail(id, "pop", statusErrorf(statusShutdown, "the server is closing"), nil)
			continue
		}
		if err := s.slotFree(); err != nil {
			s.fail(id, "pop", err, nil)
			continue
		}
		b, err := s.p.Pop(ctx)
		if err == nil && ctx.Err() != nil {
			b.Release()
			err = statusErrorf(statusShutdown, "the server is closing")
		}
		if err != nil {
			s.fail(id, "pop", err, nil)
			continue
		}
		msg, fds, err := s.describe(b)
		if err != nil {
			b.Release()
			s.fail(id, "pop", err, nil)
			continue
		}
		s.mu.Lock()
		s.held[msg.ID] = heldBatch{b: b, slot: msg.Slot}
		s.mu.Unlock()
		// "fds" also at the frame's top level: the framing rule.
		fields := map[string]any{"batch": msg}
		if len(fds) > 0 {
			fields["fds"] = len(fds)
		}
		s.reply(id, fields, fds)
	}
}

// slotFree returns an AGAIN error when the client holds every batch slot:
// the engine needs a free one to fill, so the pop could never complete.
// The pop then takes no batch.
func (s *server) slotFree() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) < s.slots {
		return nil
	}
	s.claimed--
	ids := make([]int64, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var batches, slots []string
	for _, id := range ids {
		batches = append(batches, fmt.Sprint(id))
		slots = append(slots, fmt.Sprint(s.held[id].slot))
	}
	return statusErrorf(statusAgain, "pop: all %d batch slots are held by the client (batches %s in slots %s): release one (Batch.release, or drop its tensors) before popping; Config.batch_slots = %d",
		s.slots, strings.Join(batches, ", "), strings.Join(slots, ", "), s.slots)
}

// describe makes a batch's BATCH message and the descriptors to send
// with it (a host slot's memfd, the first time), in tensor order.
func (s *server) describe(b *pipeline.Batch) (batchMsg, []int, error) {
	m := batchMsg{ID: b.Info().ID, N: b.Len()}
	var fds []int
	for i, t := range b.Tensors() {
		tm, fd, err := s.describeTensor(i, t)
		if err != nil {
			return batchMsg{}, nil, err
		}
		if fd >= 0 {
			fds = append(fds, fd)
		}
		m.Tensors = append(m.Tensors, tm)
	}
	m.tensorMsg = m.Tensors[0]
	for _, e := range b.Skipped() {
		se := sampleErrorOf(e)
		se.Status, se.Message = statusOf(e), remote.Redact(e.Error())
		m.Skipped = append(m.Skipped, se)
	}
	if s.cuda {
		slot := m.Slot
		done, err := s.doneEvent(slot)
		if err != nil {
			return batchMsg{}, nil, statusErrorf(statusCUDA, "pop: making the done event of slot %d: %v", slot, err)
		}
		c := *m.CUDA
		c.DoneHandle = done.handle
		m.CUDA = &c
	}
	return m, fds, nil
}

// describeTensor describes tensor i of a batch, with the descriptor to
// send for it, or -1.
func (s *server) describeTensor(i int, t *pipeline.Tensor) (tensorMsg, int, error) {
	info := t.Info()
	sh, err := t.Share()
	if err != nil {
		return tensorMsg{}, -1, err
	}
	m := tensorMsg{Name: t.Name(), Slot: sh.Slot, Shape: info.Shape, Dtype: wireDtype(info.Dtype), NBytes: sh.Bytes,
		Transforms: transformsMsg(t.Transforms())}
	if s.cuda {
		m.CUDA = &cudaSlot{MemHandle: hex.EncodeToString(sh.Mem.Reserved[:]), Offset: sh.Offset,
			EventHandle: hex.EncodeToString(sh.Ready.Reserved[:])}
		return m, -1, nil
	}
	m.Host = &hostSlot{Size: sh.Size, Offset: sh.Offset}
	key := [2]int{i, sh.Slot}
	if s.fdSent[key] {
		return m, -1, nil
	}
	s.fdSent[key] = true
	m.FDs = 1
	return m, sh.FD, nil
}

// wireDtype is an output type's name on the wire.
func wireDtype(d pipeline.Dtype) string {
	switch d {
	case pipeline.BF16:
		return "bf16"
	case pipeline.U8:
		return "u8"
	case pipeline.I32:
		return "i32"
	case pipeline.I64:
		return "i64"
	}
	return "f32"
}

// doneEvent returns slot's done event, made the first time (popper only):
// an interprocess event without timing on the pipeline's device, whose
// handle the client opens once per slot (opening makes no file in
// /dev/shm; making one does, in this process).
func (s *server) doneEvent(slot int) (doneEvent, error) {
	s.mu.Lock()
	d, ok := s.done[slot]
	s.mu.Unlock()
	if ok {
		return d, nil
	}
	if s.ex == nil {
		dev, err := cuda.GetDevice(s.ordinal)
		if err != nil {
			return doneEvent{}, err
		}
		if s.ex, err = cuda.NewExecutor(dev); err != nil {
			return doneEvent{}, err
		}
	}
	err := s.ex.Do(func() error {
		ev, err := cuda.NewEvent(cuda.EventDisableTiming | cuda.EventInterprocess)
		if err != nil {
			return err
		}
		h, err := ev.IPCHandle()
		if err != nil {
			return errors.Join(err, ev.Destroy())
		}
		d = doneEvent{ev: ev, handle: hex.EncodeToString(h.Reserved[:])}
		return nil
	})
	if err != nil {
		return doneEvent{}, err
	}
	s.mu.Lock()
	s.done[slot] = d
	s.mu.Unlock()
	return d, nil
}

// release gives a batch back: with "done", after the slot's done event
// (which the client recorded after its last use of the batch) on the GPU;
// without, at once (the client has synchronised its use).
func (s *server) release(req *request) {
	if req.Batch == nil {
		s.log.Warn("release without a batch: ignored")
		return
	}
	if req.EventHandle != "" {
		s.log.Warn("release: event_handle is protocol version 1's; released without waiting on it", "batch", *req.Batch)
	}
	s.mu.Lock()
	h, ok := s.held[*req.Batch]
	delete(s.held, *req.Batch)
	done, made := s.done[h.slot]
	s.mu.Unlock()
	switch {
	case !ok:
		s.log.Warn("release of a batch the client does not hold: ignored", "batch", *req.Batch)
	case req.Done && s.cuda && made:
		h.b.ReleaseAfter(done.ev)
	default:
		h.b.Release()
	}
}

// closeEvents destroys the slots' done events once the pipeline is closed
// (no stream waits on them any more), then the executor.
func (s *server) closeEvents() {
	if s.ex == nil {
		return
	}
	err := s.ex.Do(func() error {
		var errs []error
		for slot, d := range s.done {
			errs = append(errs, d.ev.Destroy())
			delete(s.done, slot)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		s.log.Warn("destroying the slots' done events", "error", err)
	}
	s.ex.Close()
}
