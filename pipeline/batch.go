package pipeline

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/dlpack"
)

// BatchInfo describes a batch tensor: contiguous, C order, shape
// [n, *SampleShape] where n is BatchSize or fewer for a ragged last batch.
type BatchInfo struct {
	Ptr    uintptr // device pointer (CUDA engine) or host address (host engine)
	Shape  []int64 // [n, *sample shape]
	Dtype  Dtype
	Device string  // "cuda:N" or "cpu"
	Stream uintptr // CUDA stream the data is ready on (0 for the host engine)
	ID     int64   // batch number, from 0, in push order
}

// Batch is one popped batch. Each Batch is its own handle; several may be
// held at once, up to Config.BatchSlots. Release it when done.
type Batch struct {
	p        *Pipeline
	req      *batchReq
	slot     *slot
	released atomic.Bool
}

func newBatch(p *Pipeline, r *result) *Batch {
	return &Batch{p: p, req: r.req, slot: r.slot}
}

// Info describes the batch. It is valid until Release.
func (b *Batch) Info() BatchInfo {
	s := b.slot
	shape := append([]int64{int64(len(b.req.samples))}, s.shape[1:]...)
	info := BatchInfo{Shape: shape, Dtype: s.dtype, ID: b.req.id}
	if s.host != nil {
		info.Device = "cpu"
		info.Ptr = sliceAddr(s.host)
	} else {
		info.Device = fmt.Sprintf("cuda:%d", s.dev0)
		info.Ptr = s.dev
		info.Stream = s.ready
	}
	return info
}

// Samples returns the batch's samples, in order.
func (b *Batch) Samples() []Sample { return b.req.samples }

// Len is the number of samples in the batch.
func (b *Batch) Len() int { return len(b.req.samples) }

// Bytes returns the batch's bytes when it lives in host memory (host
// engine), or nil. The slice is valid until Release.
func (b *Batch) Bytes() []byte {
	if b.slot.host == nil {
		return nil
	}
	return b.slot.host[:b.slot.bytes(len(b.req.samples))]
}

// Release gives the batch slot back to the pipeline (after every DLPack
// export of it has been deleted too). Later calls do nothing.
func (b *Batch) Release() {
	if b.released.CompareAndSwap(false, true) {
		b.slot.unref()
	}
}

// CopyToHost copies the batch's bytes (Info().Shape in C order) into dst,
// which must be at least that long, waiting for the batch to be ready.
func (b *Batch) CopyToHost(dst []byte) error {
	if b.released.Load() {
		return newError("copy", ErrInvalid, "", errors.New("batch already released"))
	}
	n := b.slot.bytes(b.Len())
	if int64(len(dst)) < n {
		return errorf("copy", ErrInvalid, "", "destination of %d bytes, the batch has %d", len(dst), n)
	}
	if b.slot.host != nil {
		copy(dst, b.slot.host[:n])
		return nil
	}
	e := b.slot.gpu
	err := e.ex.Do(func() error {
		if err := b.slot.readyEvent.Synchronize(); err != nil {
			return err
		}
		return cuda.CopyDtoH(dst[:n], cuda.DevicePtr(b.slot.dev))
	})
	if err != nil {
		return cudaError("copy", err)
	}
	return nil
}

// ReleaseAfter releases the batch once the GPU work captured by ev (already
// recorded, on the consumer's stream) has completed: the slot is refilled
// only after it, without blocking the host. On the host engine it is
// Release.
func (b *Batch) ReleaseAfter(ev cuda.Event) {
	if b.slot.host == nil && ev != 0 {
		b.slot.mu.Lock()
		b.slot.after = append(b.slot.after, afterEvent{ev: ev})
		b.slot.mu.Unlock()
	}
	b.Release()
}

// DLPack exports the batch as a DLPack managed tensor (format Versioned for
// DLPack 1.x consumers, Legacy for 0.x), zero-copy: a float32 or bfloat16
// tensor of Info().Shape on "cuda:N" (kDLCUDA) or the CPU. consumerStream is
// the stream the consumer will read on, as the __dlpack__ protocol passes
// it (1 for the legacy default stream or None, 2 for per-thread, -1 for no
// synchronization, else a CUstream): that stream is made to wait for the
// batch on the device, without a host sync. The slot stays alive until both
// the tensor's deleter has run (after the consumer's stream has passed the
// point of the deleter call) and the Batch is released.
func (b *Batch) DLPack(consumerStream int64, format dlpack.Format) (*dlpack.Managed, error) {
	if b.released.Load() {
		return nil, newError("dlpack", ErrInvalid, "", errors.New("batch already released"))
	}
	info := b.Info()
	d := dlpack.Desc{Data: info.Ptr, Shape: info.Shape, DType: dlpack.Scalar(dlpack.Float, 32)}
	if info.Dtype == BF16 {
		d.DType = dlpack.Scalar(dlpack.Bfloat, 16)
	}
	s := b.slot
	w := slotWaiter{s}
	if s.host != nil {
		d.Device = dlpack.Device{Type: dlpack.CPU}
	} else {
		d.Device = dlpack.Device{Type: dlpack.CUDA, ID: int32(s.dev0)}
	}
	if err := dlpack.Synchronize(d.Device, consumerStream, w); err != nil {
		return nil, newError("dlpack", ErrCUDA, "", err)
	}
	s.ref()
	m, err := dlpack.Export(d, format, exportOwner{s, consumerStream})
	if err != nil {
		s.unref()
		return nil, newError("dlpack", ErrInvalid, "", err)
	}
	return m, nil
}

// slotWaiter is the producer side of the DLPack stream handshake.
type slotWaiter struct{ s *slot }

func (w slotWaiter) WaitStream(stream uintptr) error {
	return w.s.gpu.ex.Do(func() error { return cuda.Stream(stream).WaitEvent(w.s.readyEvent) })
}

func (w slotWaiter) WaitHost() error {
	if w.s.host != nil {
		return nil
	}
	return w.s.gpu.ex.Do(w.s.readyEvent.Synchronize)
}

// exportOwner gives a DLPack export's reference on a slot back. The
// deleter may run on any thread, inside C: for device memory the event on
// the consumer's stream is recorded by the device's executor, in a new
// goroutine, before the reference is dropped.
type exportOwner struct {
	s      *slot
	stream int64
}

func (o exportOwner) Release() {
	s := o.s
	if s.host != nil || o.stream == dlpack.StreamNoSync {
		s.unref()
		return
	}
	go func() {
		defer s.unref()
		var ev cuda.Event
		err := s.gpu.ex.Do(func() error {
			var err error
			if ev, err = cuda.NewEvent(cuda.EventDisableTiming); err != nil {
				return err
			}
			return ev.Record(cuda.Stream(o.stream))
		})
		if err != nil {
			// Without the event, order the reuse by waiting here.
			s.gpu.ex.Do(func() error { return cuda.Stream(o.stream).Synchronize() })
			return
		}
		s.mu.Lock()
		s.after = append(s.after, afterEvent{ev: ev, own: true})
		s.mu.Unlock()
	}()
}
