package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// fdCache keeps files open between reads, at most capacity of them. Opens
// are single-flight, and a file is closed only once no read is using it.
type fdCache struct {
	mu       sync.Mutex
	capacity int
	files    map[string]*fdEntry
	tick     uint64
}

type fdEntry struct {
	once   sync.Once
	f      *os.File
	err    error
	refs   int
	used   uint64
	closed bool // evicted: close when refs drops to 0
}

// newFDCache sizes the cache from RLIMIT_NOFILE: half of what the process
// may open, less a margin, within [16, 4096].
func newFDCache() *fdCache {
	limit := 1024
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 && rl.Cur < 1<<30 {
		limit = int(rl.Cur)
	}
	return &fdCache{capacity: min(max((limit-64)/2, 16), 4096), files: map[string]*fdEntry{}}
}

// acquire returns the open file for path, pinned until release.
func (c *fdCache) acquire(path string) (*fdEntry, error) {
	c.mu.Lock()
	e, ok := c.files[path]
	if !ok {
		if len(c.files) >= c.capacity {
			c.evictLocked()
		}
		e = &fdEntry{}
		c.files[path] = e
	}
	e.refs++
	c.tick++
	e.used = c.tick
	c.mu.Unlock()
	e.once.Do(func() { e.f, e.err = os.Open(path) })
	if e.err != nil {
		c.mu.Lock()
		if c.files[path] == e {
			delete(c.files, path) // retry the open next time
		}
		c.mu.Unlock()
		c.release(e)
		return nil, e.err
	}
	return e, nil
}

func (c *fdCache) release(e *fdEntry) {
	c.mu.Lock()
	e.refs--
	closeNow := e.refs == 0 && e.closed && e.f != nil
	c.mu.Unlock()
	if closeNow {
		e.f.Close()
	}
}

// evictLocked drops the least recently used entries until there is room,
// closing those no read is using.
func (c *fdCache) evictLocked() {
	for len(c.files) >= c.capacity {
		var oldest string
		var oe *fdEntry
		for p, e := range c.files {
			if oe == nil || e.used < oe.used {
				oldest, oe = p, e
			}
		}
		delete(c.files, oldest)
		oe.closed = true
		if oe.refs == 0 && oe.f != nil {
			oe.f.Close()
		}
	}
}

// closeAll closes every cached file; reads still running keep theirs open
// until they finish.
func (c *fdCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, e := range c.files {
		delete(c.files, p)
		e.closed = true
		if e.refs == 0 && e.f != nil {
			e.f.Close()
		}
	}
}

// workers is a fixed pool of goroutines running tasks; run waits for a set
// of tasks and returns the first error.
type workers struct {
	tasks chan func(worker int)
	wg    sync.WaitGroup
	n     int
}

func newWorkers(n int) *workers {
	w := &workers{tasks: make(chan func(int)), n: n}
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

// run runs f(0..n-1) on the pool and returns the first error; once ctx is
// done, tasks not yet started are skipped. With span non-nil, it is called
// once per worker that took part, with the worker's first start and last
// end in this run.
func (w *workers) run(ctx context.Context, n int, f func(i int) error, span func(worker int, start, end time.Time)) error {
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

func (w *workers) stop() {
	close(w.tasks)
	w.wg.Wait()
}

// read performs one read op into dst (len(dst) == r.length): pread through
// the fd cache for local stores, the store's ReadAt otherwise. A file
// shorter than its index says is ErrDecode (a truncated shard); any other
// failure is ErrStorage.
func (c *fdCache) read(r *readOp, dst []byte) error {
	var n int
	var err error
	if d := r.src.dir; d != nil {
		var path string
		path, err = d.Path(r.key)
		if err == nil {
			var e *fdEntry
			if e, err = c.acquire(path); err == nil {
				n, err = e.f.ReadAt(dst, r.offset)
				c.release(e)
			}
		}
	} else {
		n, err = r.src.arr.Store().ReadAt(r.key, dst, r.offset)
	}
	if n == len(dst) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf("read", ErrDecode, r.src.uri, "%s: truncated: %d bytes at offset %d, only %d there", r.key, len(dst), r.offset, n)
	}
	return newError("read", ErrStorage, r.src.uri, fmt.Errorf("%s: %w", r.key, err))
}
