package pipeline

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/damacy-go/damacy/internal/cache"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

// source is an opened array (or NGFF level) with what the engines need to
// read it: its store, how a decoded chunk is laid out for the gather, and
// its fill value as float32 bits.
type source struct {
	uri   string // the sample's URI (and level, for NGFF groups)
	node  string // the URI's path in its store, which names objects from the store's root
	arr   *zarr.Array
	names []string       // axis names (OME-NGFF axes or dimension_names); empty strings where unknown
	dir   *zarr.DirStore // the local directory behind arr, for pread through the fd cache
	obj   *remote.Store  // the object store behind arr, read with ranged GETs (remote.go)
	dtype ptx.Dtype
	fill  uint32         // fill value in the engine's output type, as the kernels take it (ptx.FillFor)
	loc   *cache.Locator // plans through the metadata cache's LRUs

	// cpuOnly is set once nvCOMP has had to refuse a good share of this
	// array's chunks (zstd frames without a content size, blosc chunks of
	// another compressor or with raw streams): the CUDA engine plans its
	// chunks for the CPU from then on.
	cpuOnly atomic.Bool
	spills  atomic.Int64
}

// rel returns a store key of the source's as its URI names it: relative
// to the URI's node.
func (s *source) rel(key string) string {
	if s.node == "" {
		return key
	}
	return strings.TrimPrefix(key, strings.TrimSuffix(s.node, "/")+"/")
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
	// versions holds the versions that sizes and indexes were read at;
	// only with the chunk cache, which plans through cache.Locator.Checked.
	versions *cache.LRU[string, cache.Version]
	stats    *statsSink
	maxElem  int
	out      ptx.Dtype // the engine's output type, which fill values are given in

	stores     *remote.Opener // resolves sample URIs (remote.go)
	remoteSeen remoteCounters
}

func newMetaCache(cfg Config, stats *statsSink) *metaCache {
	m := &metaCache{
		arrays:  cache.NewLRU[string, *source](cfg.ZarrMetaCache, nil),
		indexes: cache.NewLRU[string, *zarr.ShardIndex](cfg.ShardIndexCache, nil),
		sizes:   cache.NewLRU[string, int64](cfg.ShardIndexCache, nil),
		stats:   stats,
		maxElem: cfg.MaxBytesPerElement,
		out:     cfg.Dtype.Kernel(),
		stores:  newStores(cfg),
	}
	if cfg.ChunkCacheBytes > 0 {
		m.versions = cache.NewLRU[string, cache.Version](2*cfg.ShardIndexCache, nil)
	}
	return m
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
	st, path, err := m.openURI(uri)
	if err != nil {
		return nil, openError(uri, err)
	}
	kind, err := zarr.InspectStore(st, path)
	if err != nil {
		return nil, openError(uri, err)
	}
	var arr *zarr.Array
	var names []string
	switch kind {
	case zarr.NodeArray:
		if level != 0 {
			return nil, errorf("open", ErrInvalid, uri, "level %d asked of an array (levels are for OME-NGFF groups)", level)
		}
		arr, err = zarr.OpenStore(st, path)
		if err == nil {
			names = arr.DimensionNames()
		}
	default:
		var ms *zarr.Multiscale
		ms, err = zarr.OpenNGFFStore(st, path)
		if err == nil {
			if level >= len(ms.Levels()) {
				return nil, errorf("open", ErrInvalid, uri, "level %d of an image with %d levels", level, len(ms.Levels()))
			}
			arr, err = ms.Level(level)
			for _, a := range ms.Axes() {
				names = append(names, a.Name)
			}
		}
	}
	if err != nil {
		return nil, openError(uri, err)
	}
	dt := arr.DataType()
	if dt.Size() > m.maxElem {
		return nil, errorf("open", ErrDtype, uri, "%s elements are %d bytes, above Config.MaxBytesPerElement = %d", dt, dt.Size(), m.maxElem)
	}
	pdt, ok := plan.Dtype(dt)
	if !ok {
		return nil, errorf("open", ErrDtype, uri, "data type %s has no cast to float32", dt)
	}
	fill, err := ptx.FillFor(m.out, pdt, plan.FillValue(arr.FillValue()))
	if err != nil {
		return nil, newError("open", ErrDtype, uri, err)
	}
	src := &source{uri: uri, node: path, arr: arr, names: names, dtype: pdt, fill: fill}
	src.dir, _ = arr.Store().(*zarr.DirStore)
	src.loc = &cache.Locator{Store: arr.Store(), ID: uri, Sizes: m.sizes, Indexes: m.indexes, IndexLookup: m.countIndex, Versions: m.versions}
	src.obj, _ = arr.Store().(*remote.Store)
	return src, nil
}

// countIndex counts a shard index lookup as a hit or a miss.
func (m *metaCache) countIndex(hit bool) {
	m.stats.update(func(s *Stats) {
		if hit {
			s.ShardIndexHits++
		} else {
			s.ShardIndexMisses++
		}
	})
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
