package pipeline

import (
	"fmt"
	"sync/atomic"
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
// held at once, up to Config.LookaheadBatches. Release it when done.
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
