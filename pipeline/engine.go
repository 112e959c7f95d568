package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// stage says where the oldest unfinished batch is, for Pop's wait metrics.
type stage int32

const (
	stageIO      stage = iota // reading (or waiting to read) its chunks
	stageCompute              // decoding or assembling
)

// engine produces batches. The CUDA engine assembles them in GPU memory,
// the host engine in host memory; both share the planner, IO and decoders.
type engine interface {
	// reserve sizes and allocates everything that depends on the sample
	// shape (batch slots, wave buffers); called once, before run sees a
	// request.
	reserve(shape []int) error
	// run turns requests into results, one per request, in order, until
	// reqs is closed or ctx is done.
	run(ctx context.Context, reqs <-chan *batchReq, out chan<- *result)
	// headStage reports the stage of the oldest unfinished batch.
	headStage() stage
	// slotsInUse is the number of batch slots not free.
	slotsInUse() int64
	// close frees the engine's memory once every slot is back; run has
	// returned.
	close() error
}

// slot is one batch buffer. It is handed out by Pop inside a Batch and
// comes back when the Batch and every DLPack export of it are released.
type slot struct {
	index int
	shape []int64 // [BatchSize, *sample shape]
	dtype Dtype
	host  []byte  // host engine: the batch bytes
	dev   uintptr // CUDA engine: device pointer of the batch
	dev0  int     // CUDA engine: device ordinal
	ready uintptr // CUDA engine: stream the batch is ready on

	refs   atomic.Int32
	onFree func(*slot) // returns the slot to its pool
}

// bytes is the size of the first n samples of the slot.
func (s *slot) bytes(n int) int64 {
	per := int64(s.dtype.Size())
	for _, d := range s.shape[1:] {
		per *= d
	}
	return per * int64(n)
}

func (s *slot) ref() { s.refs.Add(1) }

func (s *slot) unref() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		s.onFree(s)
	case n < 0:
		panic("pipeline: batch slot released twice")
	}
}

// slotPool hands out batch slots in FIFO order and tracks how many are out.
type slotPool struct {
	free  chan *slot
	all   []*slot
	inUse atomic.Int64
	done  chan struct{} // closed when every slot is back after drain
	mu    sync.Mutex
}

func newSlotPool(slots []*slot) *slotPool {
	sp := &slotPool{free: make(chan *slot, len(slots)), all: slots}
	for _, s := range slots {
		s.onFree = sp.put
		sp.free <- s
	}
	return sp
}

// get waits for a free slot; its reference count starts at 1.
func (sp *slotPool) get(ctx context.Context) (*slot, error) {
	select {
	case s := <-sp.free:
		sp.inUse.Add(1)
		s.refs.Store(1)
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (sp *slotPool) put(s *slot) {
	sp.inUse.Add(-1)
	sp.free <- s
}

func asError(err error, target **Error) bool { return errors.As(err, target) }
