package pipeline

import (
	"container/list"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/damacy-go/damacy/cuda"
)

// firstSightBytes is the shortest read for which an engine maps its file
// the first time it reads it (fileMaps.firstSight): decoding a large chunk
// where it lies (host engine), or copying it to the GPU from the
// registered mapping (CUDA engine), saves copying it into a slab, about a
// core for each 2 GB/s. The mapping's own costs (the calls, the page
// faults, registering, unmapping) are paid per file: a MiB keeps them
// small beside the copy they save.
const firstSightBytes = 1 << 20

// fileMaps keeps hot local files mapped read-only, so that their chunks
// are read straight out of the page cache: no pread into a staging slab,
// which on a busy host costs a core per 2 GB/s or so. For the CUDA engine
// the mappings are also page-locked (registered with the driver), so the
// GPU copies from them; registering costs about one core per 30 GB/s,
// once. The host engine decodes from them.
//
// Files are taken not to change while mapped, as the shard index cache
// takes them; with the chunk cache on, each batch checks its files and
// refresh drops the mappings of those that changed.
//
// A file is mapped once preads have fetched as many bytes of it as it
// holds (so a file read once, in a single pass over a large dataset, is
// never mapped; one read again and again is, after its first pass). The
// least recently used mappings no wave holds are dropped to make room; the
// budget bounds the bytes mapped. With firstSight set, a read at least that
// long maps its file at once, the first time, when it covers a quarter of
// the file or more: copying a large read costs more than mapping its file
// and reading it where it lies, even once. Its methods are safe for
// concurrent use.
type fileMaps struct {
	ctx     cuda.Context // the CUDA engine's, to register mappings with; 0: none (host engine)
	budget  int64        // bytes mapped at most
	maxFile int64        // larger files are never mapped
	// firstSight is the shortest read that maps its file on first sight
	// (0: none; see fileMaps).
	firstSight int64
	// firstSightRaw limits first sight to arrays stored uncompressed (the
	// CUDA engine: the GPU copies their chunks from the registered mapping
	// and no core touches them; a chunk the CPU decodes gained nothing
	// from a mapping made for one read there, and lost up to a sixth on
	// blosclz chunks of 2 MiB: BENCH.md, "Against zarrs").
	firstSightRaw bool

	mu    sync.Mutex
	used  int64
	files map[string]*fileMap
	order *list.List       // of *fileMap, front = most recently used
	heat  map[string]int64 // bytes pread from unmapped files; -1: never map
}

// fileMap is one mapped and registered file.
type fileMap struct {
	path    string
	fi      os.FileInfo      // of the file when mapped
	data    []byte           // the whole file, read-only
	mem     []byte           // the mapping: data and the rest of its last page
	reg     *cuda.HostBuffer // nil: not registered (host engine)
	refs    int              // waves using it
	elem    *list.Element
	evicted bool // out of the table: unmapped once refs is 0
}

// maxHeat bounds the table of unmapped files' read bytes; past it the
// table starts afresh.
const maxHeat = 1 << 16

// mappedFileBudget resolves Config.MappedFileBytes: 0 is an eighth of the
// memory the process may use (memoryLimit), at most 16 GiB; negative is
// none.
func mappedFileBudget(c int64) int64 {
	switch {
	case c < 0:
		return 0
	case c == 0:
		return min(memoryLimit()/8, 16<<30)
	}
	return c
}

func newFileMaps(ctx cuda.Context, budget int64) *fileMaps {
	return &fileMaps{ctx: ctx, budget: budget, maxFile: budget / 4, files: map[string]*fileMap{}, order: list.New(), heat: map[string]int64{}}
}

// acquire returns the mapping of path, held until release, or nil when
// the file is not mapped.
func (m *fileMaps) acquire(path string) *fileMap {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[path]
	if f == nil {
		return nil
	}
	f.refs++
	m.order.MoveToFront(f.elem)
	return f
}

// release ends a use of f that acquire began; an evicted mapping is
// unmapped by its last user.
func (m *fileMaps) release(f *fileMap) {
	m.mu.Lock()
	f.refs--
	drop := f.refs == 0 && f.evicted
	m.mu.Unlock()
	if drop {
		m.unmap(f)
	}
}

// note counts n bytes pread from path and reports whether the file has
// now been read as many bytes as it holds (size), and should be mapped.
func (m *fileMaps) note(path string, n, size int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.files[path] != nil {
		return false
	}
	h := m.heat[path]
	if h < 0 {
		return false
	}
	if size > m.maxFile || size <= 0 {
		m.heat[path] = -1
		return false
	}
	if len(m.heat) >= maxHeat {
		clear(m.heat)
	}
	h += n
	m.heat[path] = h
	return h >= size
}

// add maps path and, for the CUDA engine, registers it, making room by dropping the least
// recently used mappings no wave holds. When the budget cannot make room
// now it does nothing (a later note tries again); a file that cannot be
// mapped or registered is never tried again. With covered positive, it
// maps the file only if covered is at least a quarter of its size (a read
// seen for the first time, see firstSight), and not a file that could
// not be mapped before. It reports whether it mapped the file.
func (m *fileMaps) add(path string, covered int64) (bool, error) {
	if covered > 0 {
		m.mu.Lock()
		never := m.heat[path] < 0
		m.mu.Unlock()
		if never {
			return false, nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	size := fi.Size()
	if covered > 0 && (covered < size/4 || size > m.maxFile) {
		return false, nil
	}
	m.mu.Lock()
	var drop []*fileMap
	for e := m.order.Back(); e != nil && m.used+size > m.budget; {
		prev := e.Prev()
		if v := e.Value.(*fileMap); v.refs == 0 {
			m.removeLocked(v)
			drop = append(drop, v)
		}
		e = prev
	}
	fits := m.files[path] == nil && m.used+size <= m.budget
	if fits {
		m.used += size // reserved while mapping
	}
	m.mu.Unlock()
	for _, v := range drop {
		m.unmap(v)
	}
	if !fits {
		return false, nil
	}
	fm, err := m.mapAndRegister(path, f, fi)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.used -= size
		m.heat[path] = -1
		return false, err
	}
	delete(m.heat, path)
	fm.elem = m.order.PushFront(fm)
	m.files[path] = fm
	return true, nil
}

func (m *fileMaps) mapAndRegister(path string, f *os.File, fi os.FileInfo) (*fileMap, error) {
	page := int64(os.Getpagesize())
	mem, err := mapFile(f, (fi.Size()+page-1)/page*page)
	if err != nil {
		return nil, err
	}
	if m.ctx == 0 {
		return &fileMap{path: path, fi: fi, data: mem[:fi.Size()], mem: mem}, nil
	}
	unlock, err := cuda.LockThread(m.ctx)
	if err != nil {
		unmapFile(mem)
		return nil, err
	}
	defer unlock()
	reg, err := cuda.HostRegister(mem, cuda.HostRegisterReadOnly|cuda.HostRegisterPortable)
	if err != nil {
		unmapFile(mem)
		return nil, err
	}
	return &fileMap{path: path, fi: fi, data: mem[:fi.Size()], mem: mem, reg: reg}, nil
}

// refresh drops the mapping of path unless it is of the file fi describes
// (the same file, size and modification time): a file replaced or
// rewritten since it was mapped is read again, and mapped again once hot.
func (m *fileMaps) refresh(path string, fi os.FileInfo) {
	m.mu.Lock()
	f := m.files[path]
	stale := f != nil && (!os.SameFile(f.fi, fi) || f.fi.Size() != fi.Size() || !f.fi.ModTime().Equal(fi.ModTime()))
	drop := false
	if stale {
		m.removeLocked(f)
		delete(m.heat, path)
		drop = f.refs == 0
	}
	m.mu.Unlock()
	if drop {
		m.unmap(f)
	}
}

// removeLocked takes f out of the table; its bytes stay counted until it
// is unmapped.
func (m *fileMaps) removeLocked(f *fileMap) {
	delete(m.files, f.path)
	m.order.Remove(f.elem)
	f.evicted = true
}

// unmap unregisters (if registered) and unmaps f, which no wave holds any
// more.
func (m *fileMaps) unmap(f *fileMap) {
	if f.reg != nil {
		if unlock, err := cuda.LockThread(m.ctx); err == nil {
			_ = f.reg.Free()
			unlock()
		}
	}
	unmapFile(f.mem)
	m.mu.Lock()
	m.used -= f.fi.Size()
	m.mu.Unlock()
}

// mapped returns the bytes mapped now.
func (m *fileMaps) mapped() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// close unmaps every file, held or not: the engine calls it once no wave
// can read them (its run has returned and the GPU is idle).
func (m *fileMaps) close() {
	m.mu.Lock()
	var drop []*fileMap
	for _, f := range m.files {
		m.removeLocked(f)
		drop = append(drop, f)
	}
	m.mu.Unlock()
	for _, f := range drop {
		m.unmap(f)
	}
}

// readMapped runs f, which reads mapped file bytes, turning a fault (the
// file was truncated under its mapping) into ErrStorage rather than a
// crash.
func readMapped(f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			var re runtime.Error
			if e, ok := r.(error); ok && errors.As(e, &re) {
				if a, ok := re.(interface{ Addr() uintptr }); ok {
					err = errorf("read", ErrStorage, "", "a mapped file changed under the pipeline (truncated?): fault reading address %#x", a.Addr())
					return
				}
			}
			panic(r)
		}
	}()
	return f()
}

// checkMapped reports ErrDecode when read op r lies past the end of its
// file's mapping (the file is shorter than its index says), as a pread of
// it would.
func checkMapped(f *fileMap, r *readOp) error {
	if r.offset < 0 || r.offset+r.length > int64(len(f.data)) {
		return errorf("read", ErrDecode, r.src.uri, "%s: truncated: %d bytes at offset %d, only %d there", r.key, r.length, r.offset, max(int64(len(f.data))-r.offset, 0)).
			inChunk(r.src.rel(r.key), r.offset, r.length)
	}
	return nil
}
