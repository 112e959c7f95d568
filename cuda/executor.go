package cuda

import (
	"runtime"
	"sync"
)

// Executor runs driver work for one device on one OS thread that has the
// device's primary context current. CUDA contexts are current per OS
// thread, and Go moves goroutines between threads, so callers on arbitrary
// goroutines hand their driver calls to Do.
//
// The executor retains the primary context while it runs and releases it
// in Close. Streams, events, modules and device pointers made through it
// are process-wide handles: they stay valid on other threads as long as
// the context lives.
type Executor struct {
	dev  Device
	ctx  Context
	work chan func()
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the thread has released the context

	closeOnce sync.Once
	closeErr  error
}

// NewExecutor starts an executor for dev: a goroutine locked to its OS
// thread that retains dev's primary context (cuDevicePrimaryCtxRetain) and
// makes it current (cuCtxSetCurrent). It returns once that is done, or
// with the error that prevented it.
func NewExecutor(dev Device) (*Executor, error) {
	if _, err := api(); err != nil {
		return nil, err
	}
	e := &Executor{
		dev:  dev,
		work: make(chan func()),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	started := make(chan error, 1)
	go e.run(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Executor) run(started chan<- error) {
	// The thread is never unlocked: when this goroutine returns, the
	// runtime ends the thread rather than hand it, context current, to
	// other goroutines.
	runtime.LockOSThread()
	defer close(e.done)
	ctx, err := e.dev.RetainPrimaryContext()
	if err != nil {
		started <- err
		return
	}
	if err := ctx.SetCurrent(); err != nil {
		e.dev.ReleasePrimaryContext()
		started <- err
		return
	}
	e.ctx = ctx
	started <- nil
	for {
		select {
		case f := <-e.work:
			f()
		case <-e.quit:
			e.closeErr = e.dev.ReleasePrimaryContext()
			return
		}
	}
}

// Device returns the executor's device.
func (e *Executor) Device() Device { return e.dev }

// Context returns the primary context the executor keeps current, for
// LockThread in workers that call the driver themselves.
func (e *Executor) Context() Context { return e.ctx }

// Do runs f on the executor's thread and returns its error. Calls from
// many goroutines are serialised in arrival order. f must not call Do on
// the same executor (it would wait for itself), and it should not block on
// anything but the GPU: every other caller waits behind it. A panic in f
// is not recovered; it crashes the program like any goroutine's panic.
//
// After Close, Do returns ErrClosed without running f.
func (e *Executor) Do(f func() error) error {
	res := make(chan error, 1)
	select {
	case e.work <- func() { res <- f() }:
		return <-res
	case <-e.quit:
		return ErrClosed
	}
}

// Close stops the executor once the function running now, if any, has
// returned, and releases the primary context (cuDevicePrimaryCtxRelease_v2).
// Work that was not yet accepted gets ErrClosed. Close is idempotent;
// calls after the first return nil.
func (e *Executor) Close() error {
	first := false
	e.closeOnce.Do(func() {
		first = true
		close(e.quit)
		<-e.done
	})
	if !first {
		return nil
	}
	return e.closeErr
}
