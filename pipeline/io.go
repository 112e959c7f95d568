package pipeline

import (
	"errors"
	"fmt"
	"io"

	"github.com/damacy-go/damacy/internal/cache"
)

// fdCache reads the pipeline's read ops: files of local stores through an
// open-file cache, other stores through their ReadAt.
type fdCache struct {
	files *cache.Files
}

// newFDCache sizes the open-file cache from RLIMIT_NOFILE.
func newFDCache() *fdCache {
	return &fdCache{files: cache.NewFiles(cache.OpenFileLimit())}
}

// closeAll closes every cached file; reads still running keep theirs open
// until they finish.
func (c *fdCache) closeAll() { c.files.Close() }

// read performs one read op into dst (len(dst) == r.length): pread through
// the fd cache for local stores, the store's ReadAt otherwise. A file
// shorter than its index says is ErrDecode (a truncated shard); any other
// failure is ErrStorage.
func (c *fdCache) read(r *readOp, dst []byte) error { return c.readAt(r, dst, 0) }

// readAt reads the part of read op r that starts at byte at of it into dst
// (a piece of a large read); its errors are read's, about the whole read
// op (a piece that comes short says how many of r's bytes are there).
func (c *fdCache) readAt(r *readOp, dst []byte, at int64) error {
	var n int
	var err error
	if d := r.src.dir; d != nil {
		var path string
		path, err = d.Path(r.key)
		if err == nil {
			n, err = c.files.ReadAt(path, dst, r.offset+at)
		}
	} else {
		n, err = r.src.arr.Store().ReadAt(r.key, dst, r.offset+at)
	}
	if n == len(dst) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf("read", ErrDecode, r.src.uri, "%s: truncated: %d bytes at offset %d, only %d there", r.key, r.length, r.offset, at+int64(n)).
			inChunk(r.src.rel(r.key), r.offset, r.length)
	}
	return newError("read", ErrStorage, r.src.uri, fmt.Errorf("%s: %w", r.key, err)).inChunk(r.src.rel(r.key), r.offset, r.length)
}
