package bench

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/damacy-go/damacy/internal/cache"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/internal/work"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

// rig is the pipeline's own machinery the ceilings run on: its open-file
// cache (or, for a remote dataset, the bench's store), a work pool of the
// run's IO threads (or of its object-store requests in flight), and a
// work pool of one CPU worker per core (the pipeline's default
// ComputeThreads) whose tasks take a decoder each, as the pipeline's CPU
// workers do.
type rig struct {
	files *cache.Files
	obj   *remote.Store // not nil: chunk "files" are this store's keys
	io    *work.Pool
	cpu   *work.Pool
	decs  chan *decoder
}

// decoder is a zarr decoder and a scratch buffer it decodes into.
type decoder struct {
	*zarr.Decoder
	dst []byte
}

func newRig(ioThreads int, obj *remote.Store) (*rig, error) {
	n := runtime.GOMAXPROCS(0)
	r := &rig{files: cache.NewFiles(cache.OpenFileLimit()), obj: obj, io: work.NewPool(ioThreads), cpu: work.NewPool(n), decs: make(chan *decoder, n)}
	for range n {
		d, err := zarr.NewDecoder(zarr.DecoderOptions{})
		if err != nil {
			r.close()
			return nil, err
		}
		r.decs <- &decoder{Decoder: d}
	}
	return r, nil
}

func (r *rig) close() {
	r.io.Stop()
	r.cpu.Stop()
	r.files.Close()
	for len(r.decs) > 0 {
		(<-r.decs).Close()
	}
}

// decode runs f(d, i) for i in [0, n) on the CPU pool, each call with a
// decoder of its own.
func (r *rig) decode(ctx context.Context, n int, f func(d *decoder, i int) error) error {
	return r.cpu.Run(ctx, n, func(i int) error {
		d := <-r.decs
		defer func() { r.decs <- d }()
		return f(d, i)
	}, nil)
}

// readAt reads len(p) bytes of the file (the object key, for a remote
// dataset) at off.
func (r *rig) readAt(file string, p []byte, off int64) (int, error) {
	if r.obj != nil {
		return r.obj.ReadAt(file, p, off)
	}
	return r.files.ReadAt(file, p, off)
}

// chunkRef is one stored chunk a measured batch needs.
type chunkRef struct {
	file   string // its file, or its object's key in a remote dataset's store
	chunk  zarr.Chunk
	source int // the run's source (run.config.sources) that reads it
}

func (c *chunkRef) decodedBytes() int { return c.chunk.Codec.Layout().Bytes() }

// replanned is the measured batches planned again as the engines plan
// them: plan.Batch (each chunk once per batch) through cache.Locator.
type replanned struct {
	batches [][]chunkRef       // per batch, each chunk of every source once, sorted by (file, offset)
	first   []*plan.Batch[int] // per source, the first measured batch; a job's Array indexes arrays[source]
	arrays  [][]*zarr.Array    // per source, per image
}

// file returns the file of an array's key: its path in a directory store,
// or the key itself in a remote store.
func file(a *zarr.Array, key string) (string, error) {
	switch st := a.Store().(type) {
	case *zarr.DirStore:
		return st.Path(key)
	case *remote.Store:
		return key, nil
	}
	return "", fmt.Errorf("%s: neither a directory nor an object store", a.Path())
}

// replan plans the measured samples again: the chunks each batch reads,
// of every source (each source's array read with the box's ranges along
// its axes, as the engines read it).
func replan(ctx context.Context, bs *boxSet) (*replanned, error) {
	nsrc := len(bs.Sources)
	rp := &replanned{arrays: make([][]*zarr.Array, nsrc), first: make([]*plan.Batch[int], nsrc)}
	locs := make([][]*cache.Locator, nsrc)
	sizes := cache.NewLRU[string, int64](pipeline.DefaultShardIndexCache, nil)
	indexes := cache.NewLRU[string, *zarr.ShardIndex](pipeline.DefaultShardIndexCache, nil)
	for k, src := range bs.Sources {
		for i := range bs.Arrays {
			a, err := bs.levelAt(i, src.Path)
			if err != nil {
				return nil, err
			}
			rp.arrays[k] = append(rp.arrays[k], a)
			locs[k] = append(locs[k], &cache.Locator{Store: a.Store(), ID: path.Join(bs.Arrays[i], src.Path), Sizes: sizes, Indexes: indexes})
		}
	}
	for b := range bs.Batches {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var refs []chunkRef
		for k, src := range bs.Sources {
			zb := new(plan.Batch[int])
			for n, s := range bs.measuredBatch(b) {
				box := make([]zarr.Range, len(src.Axes))
				for j, a := range src.Axes {
					box[j] = zarr.Range{Start: s.Box[a][0], Stop: s.Box[a][1]}
				}
				zp, err := rp.arrays[k][s.Array].Plan(box, locs[k][s.Array])
				if err != nil {
					return nil, err
				}
				zb.Add(n, s.Array, zp)
			}
			if b == 0 {
				rp.first[k] = zb
			}
			for _, j := range zb.Jobs {
				f, err := file(rp.arrays[k][j.Array], j.Chunk.Key)
				if err != nil {
					return nil, err
				}
				refs = append(refs, chunkRef{file: f, chunk: j.Chunk, source: k})
			}
		}
		slices.SortFunc(refs, func(x, y chunkRef) int {
			return cmp.Or(strings.Compare(x.file, y.file), cmp.Compare(x.chunk.Offset, y.chunk.Offset))
		})
		rp.batches = append(rp.batches, refs)
	}
	return rp, nil
}

// readRange is one pread of the replay.
type readRange struct {
	file     string
	off, len int64
}

// replayRanges lists the byte ranges of every batch, merging exactly
// adjacent chunks of one batch up to replayMergeMaxBytes.
func replayRanges(rp *replanned) []readRange {
	var out []readRange
	for _, refs := range rp.batches {
		for _, r := range refs {
			if n := len(out); n > 0 {
				last := &out[n-1]
				if last.file == r.file && last.off+last.len == r.chunk.Offset && last.len+r.chunk.Length <= replayMergeMaxBytes {
					last.len += r.chunk.Length
					continue
				}
			}
			out = append(out, readRange{r.file, r.chunk.Offset, r.chunk.Length})
		}
	}
	return out
}

// replayStageBytes bounds the buffer the pread replay reads into.
const replayStageBytes = 1 << 30

// replayStage lays the ranges out one after another in a buffer of up to
// replayStageBytes (wrapping to its start), as the engines lay a wave's
// reads out in a staging slab, and touches every page of it: the replay
// then writes to memory as the run did, not into a small buffer that stays
// in the CPU's caches.
func replayStage(ranges []readRange) (buf []byte, offs []int64) {
	var total, maxLen int64
	for _, r := range ranges {
		total += r.len
		maxLen = max(maxLen, r.len)
	}
	size := max(min(total, replayStageBytes), maxLen)
	buf = make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	offs = make([]int64, len(ranges))
	var at int64
	for i, r := range ranges {
		if at+r.len > size {
			at = 0
		}
		offs[i] = at
		at += r.len
	}
	return buf, offs
}

// preadAll reads every range into its place in buf (replayStage) on the
// IO pool, through the open-file cache, and returns the bytes read.
func (r *rig) preadAll(ctx context.Context, ranges []readRange, buf []byte, offs []int64) (int64, error) {
	var total atomic.Int64
	err := r.io.Run(ctx, len(ranges), func(i int) error {
		rr := ranges[i]
		n, err := r.files.ReadAt(rr.file, buf[offs[i]:offs[i]+rr.len], rr.off)
		total.Add(int64(n))
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", rr.file, rr.off, err)
		}
		return nil
	}, nil)
	return total.Load(), err
}

// loadChunks reads the stored bytes of refs into one buffer; offs[i] is
// where chunk i starts.
func (r *rig) loadChunks(ctx context.Context, refs []chunkRef) ([]byte, []int64, error) {
	offs := make([]int64, len(refs))
	var n int64
	for i := range refs {
		offs[i] = n
		n += refs[i].chunk.Length
	}
	buf := make([]byte, n)
	err := r.io.Run(ctx, len(refs), func(i int) error {
		c := &refs[i]
		_, err := r.readAt(c.file, buf[offs[i]:offs[i]+c.chunk.Length], c.chunk.Offset)
		return err
	}, nil)
	return buf, offs, err
}
