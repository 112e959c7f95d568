package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync/atomic"

	"github.com/damacy-go/damacy/pipeline/cache"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// source is an opened array (or NGFF level) with what the engines need to
// read it: its store, how a decoded chunk is laid out for the gather, and
// its fill value as float32 bits.
type source struct {
	uri   string // the sample's URI (and level, for NGFF groups)
	arr   *zarr.Array
	dir   *zarr.DirStore // the local directory behind arr, for pread through the fd cache
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
	arrays  *cache.LRU[string, *source]
	indexes *cache.LRU[string, *zarr.ShardIndex]
	sizes   *cache.LRU[string, int64]
	stats   *statsSink
	maxElem int
}

func newMetaCache(cfg Config, stats *statsSink) *metaCache {
	return &metaCache{
		arrays:  cache.NewLRU[string, *source](cfg.ZarrMetaCache, nil),
		indexes: cache.NewLRU[string, *zarr.ShardIndex](cfg.ShardIndexCache, nil),
		sizes:   cache.NewLRU[string, int64](cfg.ShardIndexCache, nil),
		stats:   stats,
		maxElem: cfg.MaxBytesPerElement,
	}
}

// open returns the source for a sample's URI and level.
func (m *metaCache) open(uri string, level int) (*source, error) {
	key := uri + "\x00" + strconv.Itoa(level)
	src, hit, err := m.arrays.Get(key, func() (*source, error) { return m.load(uri, level) })
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
	kind, err := zarr.Inspect(uri)
	if err != nil {
		return nil, openError(uri, err)
	}
	var arr *zarr.Array
	switch kind {
	case zarr.NodeArray:
		if level != 0 {
			return nil, errorf("open", ErrInvalid, uri, "level %d asked of an array (levels are for OME-NGFF groups)", level)
		}
		arr, err = zarr.Open(uri)
	default:
		var ms *zarr.Multiscale
		ms, err = zarr.OpenNGFF(uri)
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
	case errors.Is(err, fs.ErrPermission):
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
	n, _, err := l.m.sizes.Get(l.src.uri+"\x00"+key, func() (int64, error) { return l.src.arr.Store().Size(key) })
	return n, err
}

func (l locator) ShardIndex(s *zarr.Sharding, shard zarr.Extent) (*zarr.ShardIndex, error) {
	key := fmt.Sprintf("%s\x00%s\x00%d\x00%d", l.src.uri, shard.Key, shard.Offset, shard.Length)
	idx, hit, err := l.m.indexes.Get(key, func() (*zarr.ShardIndex, error) {
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
