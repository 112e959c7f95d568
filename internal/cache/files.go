package cache

import (
	"os"
	"sync"
	"syscall"
)

// Files keeps files open between reads, at most a capacity of them, in an
// LRU (so opens are single-flight). A file is closed once it has left the
// cache and no read is using it. Its methods are safe for concurrent use.
type Files struct {
	files *LRU[string, *openFile]
}

// openFile is a file of the cache and the reads using it.
type openFile struct {
	f       *os.File
	fi      os.FileInfo // of f when opened, for Refresh
	mu      sync.Mutex
	refs    int
	evicted bool // out of the cache: closed once refs is 0
}

// NewFiles returns a cache of capacity open files.
func NewFiles(capacity int) *Files {
	return &Files{files: NewLRU(capacity, func(_ string, o *openFile) { o.evict() })}
}

// OpenFileLimit sizes a Files cache from RLIMIT_NOFILE: half of what the
// process may open, less a margin, within [16, 4096].
func OpenFileLimit() int {
	limit := 1024
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 && rl.Cur < 1<<30 {
		limit = int(rl.Cur)
	}
	return min(max((limit-64)/2, 16), 4096)
}

// ReadAt reads len(p) bytes of the file at path from offset off, as
// os.File.ReadAt does, through the cache.
func (c *Files) ReadAt(path string, p []byte, off int64) (int, error) {
	o, err := c.acquire(path)
	if err != nil {
		return 0, err
	}
	defer o.release()
	return o.f.ReadAt(p, off)
}

// Refresh drops the cached open file of path unless it is the file fi
// describes (os.SameFile): once a file has been replaced (another renamed
// over it, or deleted and written again), reads open the new one. Reads
// still using the old file keep it open until they finish.
func (c *Files) Refresh(path string, fi os.FileInfo) {
	if o, ok := c.files.Peek(path); ok && !os.SameFile(o.fi, fi) {
		c.files.Remove(path)
	}
}

// Size returns the size of the cached open file of path, as it was when
// opened; ok is false when the file is not open in the cache.
func (c *Files) Size(path string) (size int64, ok bool) {
	o, ok := c.files.Peek(path)
	if !ok {
		return 0, false
	}
	return o.fi.Size(), true
}

// Close closes every cached file; reads still running keep theirs open
// until they finish.
func (c *Files) Close() { c.files.Purge() }

// acquire returns the open file for path, pinned until release.
func (c *Files) acquire(path string) (*openFile, error) {
	for {
		o, _, err := c.files.Get(path, func() (*openFile, error) {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return nil, err
			}
			return &openFile{f: f, fi: fi}, nil
		})
		if err != nil {
			return nil, err
		}
		if o.pin() {
			return o, nil
		}
		// Evicted and closed between Get and pin: open it again.
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
