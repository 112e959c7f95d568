package work

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of goroutines running tasks; Run waits for a set of
// tasks and returns the first error.
type Pool struct {
	tasks chan func(worker int)
	wg    sync.WaitGroup
	n     int
}

// NewPool starts n workers.
func NewPool(n int) *Pool {
	w := &Pool{tasks: make(chan func(int)), n: n}
	w.wg.Add(n)
	for id := range n {
		go func() {
			defer w.wg.Done()
			for t := range w.tasks {
				t(id)
			}
		}()
	}
	return w
}

// Size is the number of workers.
func (w *Pool) Size() int { return w.n }

// maxGrain bounds how many tasks of a Run one hand-off to a worker
// carries.
const maxGrain = 16

// Run runs f(0..n-1) on the pool and returns the first error; once ctx is
// done, tasks not yet started are skipped. With span non-nil, it is called
// once per worker that took part, with the worker's first start and last
// end in this run. Several Runs may share the pool at once.
//
// A worker takes a Run's tasks a grain at a time, up to maxGrain when the
// Run has many tasks per worker: a hand-off wakes a goroutine, which costs
// more than a short task's share, while grains small next to a Run keep
// its tasks spread over the workers and Runs that share the pool taking
// turns.
func (w *Pool) Run(ctx context.Context, n int, f func(i int) error, span func(worker int, start, end time.Time)) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	fail := func(err error) { once.Do(func() { first = err }) }
	var busy []workerSpan
	if span != nil {
		busy = make([]workerSpan, w.n)
	}
	grain := min(maxGrain, max(1, n/(8*w.n)))
	var next atomic.Int64
	grab := func(id int) {
		defer wg.Done()
		at := int(next.Add(int64(grain))) - grain
		for i := at; i < min(at+grain, n); i++ {
			if ctx.Err() != nil {
				fail(ctx.Err())
				return
			}
			var t0 time.Time
			if busy != nil {
				t0 = time.Now()
			}
			if err := f(i); err != nil {
				fail(err)
			}
			if busy != nil {
				b := &busy[id] // only worker id writes its entry
				if b.start.IsZero() {
					b.start = t0
				}
				b.end = time.Now()
			}
		}
	}
	for sent := 0; sent < n; sent += grain {
		wg.Add(1)
		select {
		case w.tasks <- grab:
		case <-ctx.Done():
			wg.Done()
			wg.Wait()
			return ctx.Err()
		}
	}
	wg.Wait()
	for id, b := range busy {
		if !b.start.IsZero() {
			span(id, b.start, b.end)
		}
	}
	return first
}

type workerSpan struct{ start, end time.Time }

// Stop ends the workers once the tasks handed out have run.
func (w *Pool) Stop() {
	close(w.tasks)
	w.wg.Wait()
}
