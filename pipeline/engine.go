package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/damacy-go/damacy/cuda"
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
	// shape (batch slots, wave buffers); called with the pipeline's lock
	// held, before run sees a request, but possibly after run has started
	// (with Config.SampleShape empty, at the first Push).
	reserve(shape []int) error
	// run turns requests into results, one per request, in order, until
	// reqs is closed or ctx is done.
	run(ctx context.Context, reqs <-chan *batchReq, out chan<- *result)
	// headStage reports the stage of the oldest unfinished batch.
	headStage() stage
	// slotsInUse is the number of batch slots not free; called with the
	// pipeline's lock held, as reserve is.
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

	readyEvent cuda.Event  // CUDA engine: recorded when the batch is assembled
	gpu        *cudaEngine // CUDA engine: for copies and releases
	share      slotShare   // what another process needs to map the slot (Batch.Share)
	mu         sync.Mutex
	after      []afterEvent // consumer events the next assemble into the slot waits for

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
// After close, slots coming back are freed instead of reused.
type slotPool struct {
	free  chan *slot
	inUse atomic.Int64

	mu      sync.Mutex
	closed  bool
	release func(*slot) // frees a slot's memory after close
	last    func()      // runs once every slot is freed after close
}

func newSlotPool(slots []*slot) *slotPool {
	sp := &slotPool{free: make(chan *slot, len(slots))}
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

// tryGet takes a free slot if there is one, else returns nil.
func (sp *slotPool) tryGet() *slot {
	select {
	case s := <-sp.free:
		sp.inUse.Add(1)
		s.refs.Store(1)
		return s
	default:
		return nil
	}
}

func (sp *slotPool) put(s *slot) {
	sp.mu.Lock()
	n := sp.inUse.Add(-1)
	if !sp.closed {
		sp.free <- s // buffered for every slot: never blocks
		sp.mu.Unlock()
		return
	}
	sp.mu.Unlock()
	sp.release(s)
	if n == 0 {
		sp.last()
	}
}

// close frees the slots in the pool with release now, and every slot still
// out when it comes back; last runs once all are freed (now, when none is
// out).
func (sp *slotPool) close(release func(*slot), last func()) {
	sp.mu.Lock()
	sp.closed, sp.release, sp.last = true, release, last
	var now []*slot
	for len(sp.free) > 0 {
		now = append(now, <-sp.free)
	}
	out := sp.inUse.Load()
	sp.mu.Unlock()
	for _, s := range now {
		release(s)
	}
	if out == 0 {
		last()
	}
}

// afterEvent is a consumer event a slot's next fill waits for; own marks
// events the pipeline created (destroyed once waited on).
type afterEvent struct {
	ev  cuda.Event
	own bool
}

// takeAfter returns and clears the consumer events the slot's next fill
// must wait for.
func (s *slot) takeAfter() []afterEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.after
	s.after = nil
	return evs
}

func asError(err error, target **Error) bool { return errors.As(err, target) }
