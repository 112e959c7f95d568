// Package work is the pipeline's worker pool: a fixed set of goroutines
// that runs a stage's tasks (reads, checks, CPU decoding) and reports
// where each worker spent its time.
//
// It is exported so that damacy bench's ceilings run their reads and
// decodes on the same pool a run does.
package work

import (
	"context"
	"sync"
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

// Run runs f(0..n-1) on the pool and returns the first error; once ctx is
// done, tasks not yet started are skipped. With span non-nil, it is called
// once per worker that took part, with the worker's first start and last
// end in this run. Several Runs may share the pool at once.
func (w *Pool) Run(ctx context.Context, n int, f func(i int) error, span func(worker int, start, end time.Time)) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	fail := func(err error) { once.Do(func() { first = err }) }
	var busy []workerSpan
	if span != nil {
		busy = make([]workerSpan, w.n)
	}
	wg.Add(n)
	for i := range n {
		task := func(id int) {
			defer wg.Done()
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
		select {
		case w.tasks <- task:
		case <-ctx.Done():
			wg.Add(-(n - i))
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
