package pipeline

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

// lru is a fixed-capacity least-recently-used cache whose misses are
// single-flight: concurrent gets of one missing key run load once. Errors
// are not cached.
type lru[K comparable, V any] struct {
	mu       sync.Mutex
	capacity int
	order    *list.List // front = most recent; values are *lruEntry
	items    map[K]*list.Element
	loading  map[K]*lruCall[V]
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

type lruCall[V any] struct {
	done chan struct{}
	val  V
	err  error
}

func newLRU[K comparable, V any](capacity int) *lru[K, V] {
	return &lru[K, V]{capacity: capacity, order: list.New(), items: map[K]*list.Element{}, loading: map[K]*lruCall[V]{}}
}

// get returns the cached value for k, or loads it. hit reports whether the
// value was cached (or being loaded by another caller).
func (c *lru[K, V]) get(k K, load func() (V, error)) (v V, hit bool, err error) {
	c.mu.Lock()
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		v = e.Value.(*lruEntry[K, V]).val
		c.mu.Unlock()
		return v, true, nil
	}
	if call, ok := c.loading[k]; ok {
		c.mu.Unlock()
		<-call.done
		return call.val, true, call.err
	}
	call := &lruCall[V]{done: make(chan struct{})}
	c.loading[k] = call
	c.mu.Unlock()

	call.val, call.err = load()

	c.mu.Lock()
	delete(c.loading, k)
	if call.err == nil {
		c.items[k] = c.order.PushFront(&lruEntry[K, V]{k, call.val})
		for c.order.Len() > c.capacity {
			old := c.order.Back()
			c.order.Remove(old)
			delete(c.items, old.Value.(*lruEntry[K, V]).key)
		}
	}
	c.mu.Unlock()
	close(call.done)
	return call.val, false, call.err
}

// source is an opened array (or NGFF level) with what the engines need to
// read it: its store, how a decoded chunk is laid out for the gather, and
// its fill value as float32 bits.
type source struct {
	uri   string // the sample's URI (and level, for NGFF groups)
	arr   *zarr.Array
	dir   *zarr.DirStore // the local directory behind arr, for pread through the fd cache
	obj   *remote.Store  // the object store behind arr, read with ranged GETs (remote.go)
	dtype ptx.Dtype
	fill  uint32 // fill value as float32 bits, as the kernels take it

	// cpuOnly is set once nvCOMP has had to refuse a good share of this
	// array's chunks (zstd frames without a content size, blosc chunks of
	// another compressor or with raw streams): the CUDA engine plans its
	// chunks for the CPU from then on.
	cpuOnly atomic.Bool
	spills  atomic.Int64
}

// noteSpill counts a chunk nvCOMP refused; after a few, the array goes to
// the CPU.
func (s *source) noteSpill() {
	if s.spills.Add(1) >= 8 {
		s.cpuOnly.Store(true)
	}
}

// metaCache opens arrays and reads shard indexes, through two LRUs.
type metaCache struct {
	arrays  *lru[string, *source]
	indexes *lru[string, *zarr.ShardIndex]
	sizes   *lru[string, int64]
	stats   *statsSink
	maxElem int

	stores     *remote.Opener // resolves sample URIs (remote.go)
	remoteSeen remoteCounters
}

func newMetaCache(cfg Config, stats *statsSink) *metaCache {
	return &metaCache{
		arrays:  newLRU[string, *source](cfg.ZarrMetaCache),
		indexes: newLRU[string, *zarr.ShardIndex](cfg.ShardIndexCache),
		sizes:   newLRU[string, int64](cfg.ShardIndexCache),
		stats:   stats,
		maxElem: cfg.MaxBytesPerElement,
		stores:  newStores(cfg),
	}
}

// open returns the source for a sample's URI and level.
func (m *metaCache) open(uri string, level int) (*source, error) {
	key := uri + "\x00" + strconv.Itoa(level)
	src, hit, err := m.arrays.get(key, func() (*source, error) { return m.load(uri, level) })
	m.stats.update(func(s *Stats) {
		if hit {
			s.ZarrMetaHits++
		} else {
			s.ZarrMetaMisses++
		}
	})
	return src, err
}

func (m *metaCache) load(uri string, level int) (*source, error) {
	st, path, err := m.openURI(uri)
	if err != nil {
		return nil, openError(uri, err)
	}
	kind, err := zarr.InspectStore(st, path)
	if err != nil {
		return nil, openError(uri, err)
	}
	var arr *zarr.Array
	switch kind {
	case zarr.NodeArray:
		if level != 0 {
			return nil, errorf("open", ErrInvalid, uri, "level %d asked of an array (levels are for OME-NGFF groups)", level)
		}
		arr, err = zarr.OpenStore(st, path)
	default:
		var ms *zarr.Multiscale
		ms, err = zarr.OpenNGFFStore(st, path)
		if err == nil {
			if level >= len(ms.Levels()) {
				return nil, errorf("open", ErrInvalid, uri, "level %d of an image with %d levels", level, len(ms.Levels()))
			}
			arr, err = ms.Level(level)
		}
	}
	if err != nil {
		return nil, openError(uri, err)
	}
	dt := arr.DataType()
	if dt.Size() > m.maxElem {
		return nil, errorf("open", ErrDtype, uri, "%s elements are %d bytes, above Config.MaxBytesPerElement = %d", dt, dt.Size(), m.maxElem)
	}
	pdt, ok := ptxDtype(dt)
	if !ok {
		return nil, errorf("open", ErrDtype, uri, "data type %s has no cast to float32", dt)
	}
	src := &source{uri: uri, arr: arr, dtype: pdt}
	src.dir, _ = arr.Store().(*zarr.DirStore)
	src.obj, _ = arr.Store().(*remote.Store)
	fill := arr.FillValue()
	src.fill = ptx.Float32Bits(pdt, leUint(fill))
	return src, nil
}

// openError maps zarr's errors onto the pipeline's kinds.
func openError(uri string, err error) error {
	kind := ErrInvalid
	switch {
	case errors.Is(err, zarr.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		kind = ErrNotFound
	case errors.Is(err, zarr.ErrUnsupported):
		kind = ErrDtype
		var me *zarr.MetadataError
		if errors.As(err, &me) {
			kind = ErrInvalid
		}
	case errors.Is(err, fs.ErrPermission), errors.As(err, new(*remote.Error)):
		kind = ErrStorage
	}
	return newError("open", kind, uri, err)
}

func leUint(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func ptxDtype(t zarr.DataType) (ptx.Dtype, bool) {
	switch t {
	case zarr.Bool:
		return ptx.Bool, true
	case zarr.Int8:
		return ptx.Int8, true
	case zarr.Int16:
		return ptx.Int16, true
	case zarr.Int32:
		return ptx.Int32, true
	case zarr.Int64:
		return ptx.Int64, true
	case zarr.Uint8:
		return ptx.Uint8, true
	case zarr.Uint16:
		return ptx.Uint16, true
	case zarr.Uint32:
		return ptx.Uint32, true
	case zarr.Uint64:
		return ptx.Uint64, true
	case zarr.Float16:
		return ptx.Float16, true
	case zarr.Float32:
		return ptx.Float32, true
	case zarr.Float64:
		return ptx.Float64, true
	}
	return 0, false
}

// locator is a zarr.Locator for one source that goes through the caches.
type locator struct {
	m   *metaCache
	src *source
}

func (l locator) Size(key string) (int64, error) {
	n, _, err := l.m.sizes.get(l.src.uri+"\x00"+key, func() (int64, error) { return l.src.arr.Store().Size(key) })
	return n, err
}

func (l locator) ShardIndex(s *zarr.Sharding, shard zarr.Extent) (*zarr.ShardIndex, error) {
	key := fmt.Sprintf("%s\x00%s\x00%d\x00%d", l.src.uri, shard.Key, shard.Offset, shard.Length)
	idx, hit, err := l.m.indexes.get(key, func() (*zarr.ShardIndex, error) {
		return zarr.ReadShardIndex(l.src.arr.Store(), s, shard)
	})
	l.m.stats.update(func(s *Stats) {
		if hit {
			s.ShardIndexHits++
		} else {
			s.ShardIndexMisses++
		}
	})
	return idx, err
}
