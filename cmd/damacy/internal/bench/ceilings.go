package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// Ceiling is one bound measured after the run, over the run's own data.
type Ceiling struct {
	Name   string        `json:"name"`
	GBps   float64       `json:"gbps"`   // the measurement's own rate
	Of     string        `json:"of"`     // what GBps counts: read, decoded, output or copied bytes
	Detail string        `json:"detail"` // how it was measured
	Bytes  int64         `json:"bytes"`  // bytes the measurement handled
	Time   time.Duration `json:"time_ns"`
	// OutputGBps is GBps scaled to output bytes: the throughput the run
	// could reach if this were the only limit.
	OutputGBps float64 `json:"output_gbps"`
	// Limits is false for a ceiling that does not bound this engine (the
	// CPU decoders when the GPU decoded, the CPU assemble under the CUDA
	// engine); such ceilings are shown but not counted as the lowest.
	Limits bool   `json:"limits"`
	Note   string `json:"note,omitempty"`
}

// Bounds of the ceiling measurements, so that they take seconds, not
// minutes, and memory stays bounded whatever the scenario.
const (
	decodeSampleBytes   = 512 << 20 // compressed bytes decoded by decode-only
	assembleArenaBytes  = 512 << 20 // decoded bytes behind assemble-only
	minCeilingTime      = 300 * time.Millisecond
	maxCeilingRepeats   = 50
	h2dMinBytes         = 1 << 30
	replayMergeMaxBytes = 4 << 20 // exactly adjacent ranges of a batch merge up to this size
)

// chunkRef is one stored chunk a measured batch needs.
type chunkRef struct {
	file  string
	chunk zarr.Chunk
}

func (c *chunkRef) decodedBytes() int { return c.chunk.Codec.Layout().Bytes() }

// replanned is the measured batches planned again with package zarr.
type replanned struct {
	batches [][]chunkRef // per batch, each chunk once, sorted by (file, offset)
	first   []*zarr.Plan // the plans of the first measured batch's samples
	arrays  []*zarr.Array
}

// replan plans the measured samples with package zarr: the chunks each
// batch reads, as the engines plan them (each chunk once per batch).
func replan(ctx context.Context, bs *boxSet) (*replanned, error) {
	rp := &replanned{arrays: make([]*zarr.Array, len(bs.Arrays))}
	locs := make([]zarr.Locator, len(bs.Arrays))
	paths := make([]func(string) (string, error), len(bs.Arrays))
	for i := range bs.Arrays {
		m, err := zarr.OpenNGFF(filepath.Join(bs.DatasetDir, bs.Arrays[i]))
		if err != nil {
			return nil, err
		}
		a, err := m.Level(bs.Level)
		if err != nil {
			return nil, err
		}
		ds, ok := a.Store().(*zarr.DirStore)
		if !ok {
			return nil, fmt.Errorf("%s: not a directory store", bs.Arrays[i])
		}
		rp.arrays[i], locs[i], paths[i] = a, newCachingLocator(a.Store()), ds.Path
	}
	measured := bs.Samples[bs.Warmup*bs.BatchSize:]
	for b := range bs.Batches {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seen := map[[2]any]bool{}
		var refs []chunkRef
		for _, s := range measured[b*bs.BatchSize : (b+1)*bs.BatchSize] {
			box := make([]zarr.Range, len(s.Box))
			for d, r := range s.Box {
				box[d] = zarr.Range{Start: r[0], Stop: r[1]}
			}
			pl, err := rp.arrays[s.Array].Plan(box, locs[s.Array])
			if err != nil {
				return nil, err
			}
			if b == 0 {
				rp.first = append(rp.first, pl)
			}
			for _, ch := range pl.Chunks {
				file, err := paths[s.Array](ch.Key)
				if err != nil {
					return nil, err
				}
				id := [2]any{file, ch.Offset}
				if seen[id] {
					continue
				}
				seen[id] = true
				refs = append(refs, chunkRef{file: file, chunk: ch})
			}
		}
		slices.SortFunc(refs, func(x, y chunkRef) int {
			return cmp.Or(strings.Compare(x.file, y.file), cmp.Compare(x.chunk.Offset, y.chunk.Offset))
		})
		rp.batches = append(rp.batches, refs)
	}
	return rp, nil
}

// cachingLocator answers planning questions from a store, remembering
// object sizes and shard indexes.
type cachingLocator struct {
	inner zarr.Locator
	mu    sync.Mutex
	sizes map[string]sizeResult
	idx   map[zarr.Extent]*zarr.ShardIndex
}

type sizeResult struct {
	n   int64
	err error
}

func newCachingLocator(s zarr.Store) *cachingLocator {
	return &cachingLocator{inner: zarr.NewLocator(s), sizes: map[string]sizeResult{}, idx: map[zarr.Extent]*zarr.ShardIndex{}}
}

func (l *cachingLocator) Size(key string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.sizes[key]; ok {
		return r.n, r.err
	}
	n, err := l.inner.Size(key)
	l.sizes[key] = sizeResult{n, err}
	return n, err
}

func (l *cachingLocator) ShardIndex(s *zarr.Sharding, shard zarr.Extent) (*zarr.ShardIndex, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if x, ok := l.idx[shard]; ok {
		return x, nil
	}
	x, err := l.inner.ShardIndex(s, shard)
	if err != nil {
		return nil, err
	}
	l.idx[shard] = x
	return x, nil
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

// fileSet opens each file once and shares the handle among goroutines.
type fileSet struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func (fs *fileSet) get(path string) (*os.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fs.files == nil {
		fs.files = map[string]*os.File{}
	}
	fs.files[path] = f
	return f, nil
}

func (fs *fileSet) close() {
	for _, f := range fs.files {
		f.Close()
	}
}

// parallelDo runs f(i) for i in [0, n) on workers goroutines; the first
// error stops the rest and is returned.
func parallelDo(ctx context.Context, n, workers int, f func(worker, i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range min(workers, n) {
		wg.Go(func() {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = f(w, i)
				}
				if err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
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

// preadAll reads every range into its place in buf (replayStage) with
// workers goroutines and returns the bytes read.
func preadAll(ctx context.Context, fset *fileSet, ranges []readRange, buf []byte, offs []int64, workers int) (int64, error) {
	var total atomic.Int64
	err := parallelDo(ctx, len(ranges), workers, func(w, i int) error {
		r := ranges[i]
		f, err := fset.get(r.file)
		if err != nil {
			return err
		}
		n, err := f.ReadAt(buf[offs[i]:offs[i]+r.len], r.off)
		total.Add(int64(n))
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", r.file, r.off, err)
		}
		return nil
	})
	return total.Load(), err
}

// measureCeilings measures the ceilings after the run (see damacy help
// bench). A ceiling that cannot be measured is left out, with the reason
// in the returned error; the others are still returned.
func measureCeilings(ctx context.Context, sc *Scenario, bs *boxSet, rep *Report, st pipeline.Stats, o Options, tr *tracer) ([]Ceiling, error) {
	t := time.Now()
	rp, err := replan(ctx, bs)
	if err != nil {
		return nil, fmt.Errorf("planning the boxes again: %w", err)
	}
	tr.span(traceRowPhases, "ceiling", "replan", t, time.Now(), nil)
	out := float64(st.OutputBytes)
	gpu := strings.HasPrefix(rep.Device, "cuda")
	var cs []Ceiling
	var errs []error

	// pread replay.
	if o.DropCache {
		if err := dropDatasetCache(bs.DatasetDir); err != nil {
			return nil, err
		}
	}
	ranges := replayRanges(rp)
	fset := new(fileSet)
	defer fset.close()
	threads := ioThreads(sc)
	buf, offs := replayStage(ranges)
	t = time.Now()
	n, err := preadAll(ctx, fset, ranges, buf, offs, threads)
	el := time.Since(t)
	tr.span(traceRowPhases, "ceiling", "pread replay", t, t.Add(el), map[string]any{"ranges": len(ranges), "bytes": n})
	if err != nil {
		return nil, err
	}
	c := Ceiling{Name: "pread replay", Of: "read", Detail: fmt.Sprintf("%d threads, %d ranges, %s per range", threads, len(ranges), base.FormatBytes(n/int64(max(len(ranges), 1)))), Bytes: n, Time: el, Limits: true}
	c.GBps = float64(n) / el.Seconds() / 1e9
	if n > 0 {
		// The run needs BytesRead per OutputBytes; the replay reads only
		// the chunks, so scale by what the run actually read.
		c.OutputGBps = c.GBps * out / float64(max(st.BytesRead, n))
	}
	cs = append(cs, c)

	// decode-only, on the CPU and (CUDA engine with nvCOMP) on the GPU.
	// Both are scaled by the bytes the run decoded.
	decoded := st.Decompress.OutBytes
	if decoded == 0 {
		for _, refs := range rp.batches {
			for i := range refs {
				decoded += int64(refs[i].decodedBytes())
			}
		}
	}
	t = time.Now()
	ds, err := loadDecodeSample(ctx, fset, rp)
	if err != nil {
		errs = append(errs, fmt.Errorf("decode-only: %w", err))
	} else {
		c, err = decodeOnly(ctx, ds)
		tr.span(traceRowPhases, "ceiling", "decode-only (cpu)", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("decode-only: %w", err))
		} else {
			c.OutputGBps = c.GBps * out / float64(max(decoded, 1))
			c.Limits = st.ChunksGPU == 0
			if !c.Limits {
				c.Note = fmt.Sprintf("%d of %d chunks decoded on the GPU", st.ChunksGPU, st.ChunksDecoded)
			}
			cs = append(cs, c)
		}
	}
	if gpu && ds != nil && st.ChunksGPU > 0 {
		t = time.Now()
		c, err := nvcompDecodeOnly(rep.Device, ds, nvcompCallBytes(int64(sc.Run.DeviceBuffer)))
		tr.span(traceRowPhases, "ceiling", "decode-only (nvcomp)", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("decode-only (nvcomp): %w", err))
		} else {
			c.OutputGBps = c.GBps * out / float64(max(decoded, 1))
			cs = append(cs, c)
		}
	}

	// assemble-only, on the CPU and (CUDA engine) on the GPU.
	t = time.Now()
	ab, err := prepareAssemble(ctx, fset, rp, bs)
	if err != nil {
		errs = append(errs, fmt.Errorf("assemble-only: %w", err))
	} else {
		c := assembleOnlyCPU(ab)
		c.Limits = !gpu
		cs = append(cs, c)
		tr.span(traceRowPhases, "ceiling", "assemble-only (cpu)", t, time.Now(), nil)
	}
	if gpu {
		t = time.Now()
		gcs, err := gpuCeilings(rep.Device, st, ab)
		tr.span(traceRowPhases, "ceiling", "gpu ceilings", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, err)
		}
		cs = append(cs, gcs...)
	}
	return cs, errors.Join(errs...)
}

// decodeSample is the stored chunks of the first measured batches, up to
// decodeSampleBytes, loaded into memory for the decode-only ceilings.
type decodeSample struct {
	refs    []chunkRef
	src     []byte  // the stored bytes, chunk after chunk
	offs    []int64 // where chunk i starts in src
	stored  int64
	decoded int64
}

func loadDecodeSample(ctx context.Context, fset *fileSet, rp *replanned) (*decodeSample, error) {
	ds := new(decodeSample)
	for _, b := range rp.batches {
		for _, r := range b {
			ds.refs = append(ds.refs, r)
			ds.stored += r.chunk.Length
			ds.decoded += int64(r.decodedBytes())
		}
		if ds.stored >= decodeSampleBytes {
			break
		}
	}
	if len(ds.refs) == 0 {
		return nil, errors.New("no stored chunks in the boxes")
	}
	var err error
	ds.src, ds.offs, err = loadChunks(ctx, fset, ds.refs)
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// stored returns chunk i's stored bytes.
func (ds *decodeSample) chunk(i int) []byte {
	return ds.src[ds.offs[i] : ds.offs[i]+ds.refs[i].chunk.Length]
}

// decodeOnly decodes the sample with one decoder per CPU, repeating the
// pass until minCeilingTime has passed.
func decodeOnly(ctx context.Context, ds *decodeSample) (Ceiling, error) {
	refs := ds.refs
	workers := runtime.GOMAXPROCS(0)
	decs := make([]*zarr.Decoder, workers)
	dsts := make([][]byte, workers)
	defer func() {
		for _, d := range decs {
			if d != nil {
				d.Close()
			}
		}
	}()
	pass := func() error {
		return parallelDo(ctx, len(refs), workers, func(w, i int) error {
			if decs[w] == nil {
				d, err := zarr.NewDecoder(zarr.DecoderOptions{})
				if err != nil {
					return err
				}
				decs[w] = d
			}
			r := &refs[i]
			n := r.decodedBytes()
			if len(dsts[w]) < n {
				dsts[w] = make([]byte, n)
			}
			return decs[w].Decode(dsts[w][:n], &r.chunk, ds.chunk(i))
		})
	}
	el, reps, err := timeRepeated(pass)
	if err != nil {
		return Ceiling{}, err
	}
	total := ds.decoded * int64(reps)
	return Ceiling{
		Name: "decode-only (cpu)", Of: "decoded", Detail: fmt.Sprintf("%d workers, %d chunks, %s stored", workers, len(refs), base.FormatBytes(ds.stored)),
		Bytes: total, Time: el, GBps: float64(total) / el.Seconds() / 1e9,
	}, nil
}

// timeRepeated runs f until minCeilingTime has passed (at most
// maxCeilingRepeats times) and returns the time and the repetitions.
func timeRepeated(f func() error) (time.Duration, int, error) {
	t := time.Now()
	reps := 0
	for reps < maxCeilingRepeats && (reps == 0 || time.Since(t) < minCeilingTime) {
		if err := f(); err != nil {
			return 0, 0, err
		}
		reps++
	}
	return time.Since(t), reps, nil
}

// loadChunks reads the stored bytes of refs into one buffer; offs[i] is
// where chunk i starts.
func loadChunks(ctx context.Context, fset *fileSet, refs []chunkRef) ([]byte, []int64, error) {
	offs := make([]int64, len(refs))
	var n int64
	for i := range refs {
		offs[i] = n
		n += refs[i].chunk.Length
	}
	buf := make([]byte, n)
	err := parallelDo(ctx, len(refs), runtime.GOMAXPROCS(0), func(_, i int) error {
		r := &refs[i]
		f, err := fset.get(r.file)
		if err != nil {
			return err
		}
		_, err = f.ReadAt(buf[offs[i]:offs[i]+r.chunk.Length], r.chunk.Offset)
		return err
	})
	return buf, offs, err
}

// assembleBench is one batch's assemble work: decoded chunks in an arena
// and the ops that gather them into a batch.
type assembleBench struct {
	plan  *ptx.Plan
	arena []byte
}

// prepareAssemble decodes the chunks of the first measured batch's first
// samples (up to assembleArenaBytes) into an arena and plans their
// assembly as the engines do.
func prepareAssemble(ctx context.Context, fset *fileSet, rp *replanned, bs *boxSet) (*assembleBench, error) {
	dt, _ := pipeline.ParseDtype(bs.Dtype)
	outType := ptx.Float32
	if dt == pipeline.BF16 {
		outType = ptx.BFloat16
	}
	// Choose the samples and lay their distinct chunks out in the arena.
	at := map[[2]any]int64{}
	var refs []chunkRef
	var arena int64
	samples := 0
	for k, pl := range rp.first {
		var add int64
		var fresh []chunkRef
		arr := rp.arrays[bs.Samples[bs.Warmup*bs.BatchSize+k].Array]
		ds := arr.Store().(*zarr.DirStore)
		for _, ch := range pl.Chunks {
			file, err := ds.Path(ch.Key)
			if err != nil {
				return nil, err
			}
			if _, ok := at[[2]any{file, ch.Offset}]; ok {
				continue
			}
			fresh = append(fresh, chunkRef{file: file, chunk: ch})
			add += alignUp(int64(ch.Codec.Layout().Bytes()), 64)
		}
		if samples > 0 && arena+add > assembleArenaBytes {
			break
		}
		for _, r := range fresh {
			at[[2]any{r.file, r.chunk.Offset}] = arena
			arena += alignUp(int64(r.decodedBytes()), 64)
			refs = append(refs, r)
		}
		samples++
	}
	shape := make([]int, len(bs.SampleShape))
	for i, n := range bs.SampleShape {
		shape[i] = int(n)
	}
	plan, err := ptx.NewPlan(ptx.Layout{Samples: samples, Shape: shape, Dtype: outType})
	if err != nil {
		return nil, err
	}
	for k := range samples {
		pl := rp.first[k]
		arr := rp.arrays[bs.Samples[bs.Warmup*bs.BatchSize+k].Array]
		ds := arr.Store().(*zarr.DirStore)
		if err := addOps(plan, k, pl, ds, at); err != nil {
			return nil, err
		}
	}
	// Decode the chunks into the arena.
	src, offs, err := loadChunks(ctx, fset, refs)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, max(arena, plan.SourceEnd()))
	workers := runtime.GOMAXPROCS(0)
	decs := make([]*zarr.Decoder, workers)
	defer func() {
		for _, d := range decs {
			if d != nil {
				d.Close()
			}
		}
	}()
	err = parallelDo(ctx, len(refs), workers, func(w, i int) error {
		if decs[w] == nil {
			d, err := zarr.NewDecoder(zarr.DecoderOptions{})
			if err != nil {
				return err
			}
			decs[w] = d
		}
		r := &refs[i]
		o := at[[2]any{r.file, r.chunk.Offset}]
		return decs[w].Decode(buf[o:o+int64(r.decodedBytes())], &r.chunk, src[offs[i]:offs[i]+r.chunk.Length])
	})
	if err != nil {
		return nil, err
	}
	return &assembleBench{plan: plan, arena: buf}, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// addOps adds sample k's copies and fills to plan, as the engines build
// their assemble ops from a zarr plan.
func addOps(plan *ptx.Plan, k int, pl *zarr.Plan, ds *zarr.DirStore, at map[[2]any]int64) error {
	var fill [8]byte
	copy(fill[:], pl.Fill)
	pdt, err := ptxDtype(pl.DataType)
	if err != nil {
		return err
	}
	fillBits := ptx.Float32Bits(pdt, binary.LittleEndian.Uint64(fill[:]))
	for _, cp := range pl.Copies {
		dst, ext := toInts(cp.Dst), toInts(cp.Shape)
		if cp.Chunk < 0 {
			if err := plan.Fill(k, dst, ext, fillBits); err != nil {
				return err
			}
			continue
		}
		ch := &pl.Chunks[cp.Chunk]
		file, err := ds.Path(ch.Key)
		if err != nil {
			return err
		}
		l := ch.Codec.Layout()
		sdt, err := ptxDtype(l.DataType)
		if err != nil {
			return err
		}
		src := &ptx.Source{
			Offset:    at[[2]any{file, ch.Offset}],
			Dtype:     sdt,
			BigEndian: l.Endian == zarr.BigEndian,
			Shape:     toInts(l.Shape),
			Strides:   toInts(l.Strides),
		}
		if err := plan.Copy(k, dst, ext, src, toInts(cp.Src)); err != nil {
			return err
		}
	}
	return nil
}

func toInts(s []int64) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[i] = int(v)
	}
	return out
}

// ptxDtype maps a zarr data type to the kernels' numbering, by name.
func ptxDtype(dt zarr.DataType) (ptx.Dtype, error) {
	for d := ptx.Bool; d <= ptx.Float64; d++ {
		if d.String() == dt.String() {
			return d, nil
		}
	}
	return 0, fmt.Errorf("no kernel type for %v", dt)
}

// assembleOnlyCPU times ptx.AssembleHost, the host engine's assemble, over
// one batch with one worker per CPU.
func assembleOnlyCPU(ab *assembleBench) Ceiling {
	l := ab.plan.Layout()
	out := make([]byte, l.Bytes())
	workers := runtime.GOMAXPROCS(0)
	var aerr error
	el, reps, err := timeRepeated(func() error {
		aerr = ptx.AssembleHost(out, l, ab.arena, ab.plan.Ops(), workers)
		return aerr
	})
	if err != nil {
		return Ceiling{Name: "assemble-only (cpu)", Note: err.Error()}
	}
	total := l.Bytes() * int64(reps)
	g := float64(total) / el.Seconds() / 1e9
	return Ceiling{
		Name: "assemble-only (cpu)", Of: "output", Detail: fmt.Sprintf("%d workers, %d samples, %d ops", workers, l.Samples, len(ab.plan.Ops())),
		Bytes: total, Time: el, GBps: g, OutputGBps: g,
	}
}
