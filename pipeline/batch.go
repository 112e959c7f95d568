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

// Batch is one popped batch: one tensor per source (Config.Sources), each
// in its own batch slot. Each Batch is its own handle; several may be held
// at once, up to Config.BatchSlots. Release it when done. Info, Bytes,
// CopyToHost, DLPack and Share are the first source's tensor's.
type Batch struct {
	p        *Pipeline
	req      *batchReq
	tensors  []*Tensor
	skipped  []*Error
	released atomic.Bool
}

// Tensor is one source's tensor of a batch, valid until the batch is
// released (a DLPack export of it, until its deleter runs too).
type Tensor struct {
	b    *Batch
	name string
	slot *slot
	xf   []Transform
}

func newBatch(p *Pipeline, rs []*result) *Batch {
	b := &Batch{p: p, req: rs[0].req}
	for i, r := range rs {
		b.tensors = append(b.tensors, &Tensor{b: b, name: p.lanes[i].src.Name, slot: r.slot, xf: r.req.xf})
	}
	return b
}

// Transforms returns each sample's transform (Config.Augment), as the
// first source got it, or nil without augmentation.
func (b *Batch) Transforms() []Transform { return b.tensors[0].xf }

// Transforms returns each sample's transform as this tensor's source got
// it (its axes, and Intensity only where it applies), or nil without
// augmentation.
func (t *Tensor) Transforms() []Transform { return t.xf }

// Tensors returns the batch's tensors, in the order of Config.Sources.
func (b *Batch) Tensors() []*Tensor { return b.tensors }

// Tensor returns the tensor of the source called name, or nil.
func (b *Batch) Tensor(name string) *Tensor {
	for _, t := range b.tensors {
		if t.name == name {
			return t
		}
	}
	return nil
}

// Name is the tensor's source's name.
func (t *Tensor) Name() string { return t.name }

// Info describes the batch's first tensor. It is valid until Release.
func (b *Batch) Info() BatchInfo { return b.tensors[0].Info() }

// Info describes the tensor. It is valid until the batch's Release.
func (t *Tensor) Info() BatchInfo {
	s := t.slot
	shape := append([]int64{int64(t.b.Len())}, s.shape[1:]...)
	info := BatchInfo{Shape: shape, Dtype: s.dtype, ID: t.b.req.id}
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

// Positions returns each sample's position in the pipeline's intake
// (counted from 1, as Error.Position), in order.
func (b *Batch) Positions() []int64 { return b.req.pos }

// Skipped returns the samples that Config.OnError's OnErrorSkip left out
// of the batch, in intake order: each error names the sample's Position,
// its URI, Source and Chunk where they apply, and the cause. Each sample
// the batch took is either among Samples or here, once.
func (b *Batch) Skipped() []*Error { return b.skipped }

// Len is the number of samples in the batch.
func (b *Batch) Len() int { return len(b.req.samples) }

// Bytes returns the first tensor's bytes when it lives in host memory
// (host engine), or nil. The slice is valid until Release.
func (b *Batch) Bytes() []byte { return b.tensors[0].Bytes() }

// Bytes returns the tensor's bytes when it lives in host memory (host
// engine), or nil. The slice is valid until the batch's Release.
func (t *Tensor) Bytes() []byte {
	if t.slot.host == nil {
		return nil
	}
	return t.slot.host[:t.slot.bytes(t.b.Len())]
}

// Release gives the batch's slots back to the pipeline (each after every
// DLPack export of its tensor has been deleted too). Later calls do
// nothing.
func (b *Batch) Release() {
	if b.released.CompareAndSwap(false, true) {
		for _, t := range b.tensors {
			t.slot.unref()
		}
	}
}

// CopyToHost copies the first tensor's bytes into dst (see
// Tensor.CopyToHost).
func (b *Batch) CopyToHost(dst []byte) error { return b.tensors[0].CopyToHost(dst) }

// CopyToHost copies the tensor's bytes (Info().Shape in C order) into dst,
// which must be at least that long, waiting for the batch to be ready.
func (t *Tensor) CopyToHost(dst []byte) error {
	if t.b.released.Load() {
		return newError("copy", ErrInvalid, "", errors.New("batch already released"))
	}
	s := t.slot
	n := s.bytes(t.b.Len())
	if int64(len(dst)) < n {
		return errorf("copy", ErrInvalid, "", "destination of %d bytes, the tensor has %d", len(dst), n)
	}
	if s.host != nil {
		copy(dst, s.host[:n])
		return nil
	}
	err := s.gpu.ex.Do(func() error {
		if err := s.readyEvent.Synchronize(); err != nil {
			return err
		}
		return cuda.CopyDtoH(dst[:n], cuda.DevicePtr(s.dev))
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
	for _, t := range b.tensors {
		if s := t.slot; s.host == nil && ev != 0 && !b.released.Load() {
			s.mu.Lock()
			s.after = append(s.after, afterEvent{ev: ev})
			s.mu.Unlock()
		}
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
	return b.tensors[0].DLPack(consumerStream, format)
}

// DLPack exports the tensor as Batch.DLPack exports the first; its type
// is its source's Dtype.
func (t *Tensor) DLPack(consumerStream int64, format dlpack.Format) (*dlpack.Managed, error) {
	if t.b.released.Load() {
		return nil, newError("dlpack", ErrInvalid, "", errors.New("batch already released"))
	}
	info := t.Info()
	d := dlpack.Desc{Data: info.Ptr, Shape: info.Shape, DType: info.Dtype.dlpack()}
	s := t.slot
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
