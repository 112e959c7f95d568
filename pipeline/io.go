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

// fdCache keeps files open between reads, at most capacity of them, in an
// lru (so opens are single-flight). A file is closed once it has left the
// cache and no read is using it.
type fdCache struct {
	files *lru[string, *openFile]
}

// openFile is a file of the cache and the reads using it.
type openFile struct {
	f       *os.File
	mu      sync.Mutex
	refs    int
	evicted bool // out of the cache: closed once refs is 0
}

// newFDCache returns a cache of capacity files.
func newFDCache(capacity int) *fdCache {
	return &fdCache{files: newLRU(capacity, func(_ string, o *openFile) { o.evict() })}
}

// fdCacheCapacity sizes the cache from RLIMIT_NOFILE: half of what the
// process may open, less a margin, within [16, 4096].
func fdCacheCapacity() int {
	limit := 1024
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 && rl.Cur < 1<<30 {
		limit = int(rl.Cur)
	}
	return min(max((limit-64)/2, 16), 4096)
}

// acquire returns the open file for path, pinned until release.
func (c *fdCache) acquire(path string) (*openFile, error) {
	for {
		o, _, err := c.files.get(path, func() (*openFile, error) {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			return &openFile{f: f}, nil
		})
		if err != nil {
			return nil, err
		}
		if o.pin() {
			return o, nil
		}
		// Evicted and closed between get and pin: open it again.
	}
}

// pin counts one more read using the file, unless it is closed.
func (o *openFile) pin() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.evicted && o.refs == 0 {
		return false
	}
	o.refs++
	return true
}

// release ends a read that acquire pinned the file for.
func (o *openFile) release() {
	o.mu.Lock()
	o.refs--
	closeNow := o.refs == 0 && o.evicted
	o.mu.Unlock()
	if closeNow {
		o.f.Close()
	}
}

// evict marks the file as out of the cache, closing it unless a read is
// using it.
func (o *openFile) evict() {
	o.mu.Lock()
	o.evicted = true
	closeNow := o.refs == 0
	o.mu.Unlock()
	if closeNow {
		o.f.Close()
	}
}

// closeAll closes every cached file; reads still running keep theirs open
// until they finish.
func (c *fdCache) closeAll() { c.files.purge() }

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
			var o *openFile
			if o, err = c.acquire(path); err == nil {
				n, err = o.f.ReadAt(dst, r.offset)
				o.release()
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
