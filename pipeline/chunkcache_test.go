package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// checkRegion checks the chunk cache's bookkeeping: the free extents are
// sorted, apart and inside the region, and with the live entries they
// tile it exactly, so no two entries share a byte and none lies outside
// the budget.
func checkRegion(t *testing.T, c *chunkCache, live map[*cacheEntry]bool) {
	t.Helper()
	type span struct{ off, n int64 }
	var spans []span
	var free int64
	for i, x := range c.free {
		if x.n <= 0 || (i > 0 && c.free[i-1].off+c.free[i-1].n >= x.off) {
			t.Fatalf("free extents %v: empty, unsorted, overlapping or unmerged", c.free)
		}
		spans = append(spans, span{x.off, x.n})
		free += x.n
	}
	var held int64
	for e := range live {
		spans = append(spans, span{e.off, e.size})
		held += e.size
	}
	if held != c.held || held+free != c.size {
		t.Fatalf("entries hold %d bytes (cache says %d), %d free, region %d", held, c.held, free, c.size)
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.off - b.off) })
	at := int64(0)
	for _, s := range spans {
		if s.off != at {
			t.Fatalf("region not tiled at byte %d: next span %+v", at, s)
		}
		at += s.n
	}
	if at != c.size {
		t.Fatalf("spans end at %d, region is %d", at, c.size)
	}
}

// TestChunkCacheBudget drives the chunk cache's bookkeeping with random
// chunk sizes, lookups, pins and failures: it never holds more than its
// region, entries never overlap, a pinned entry is never evicted, and a
// published entry is found until evicted.
func TestChunkCacheBudget(t *testing.T) {
	rng := newTestRand(t)
	stats := new(statsSink)
	c := newChunkCache(1<<20+100, false, stats) // rounded down to 256
	if c.size != 1<<20 {
		t.Fatalf("region of %d bytes, want %d", c.size, 1<<20)
	}
	src := ptx.Source{Dtype: ptx.Uint16, Shape: []int{8, 8}}
	live := map[*cacheEntry]bool{}
	var pinned []*cacheEntry
	sizes := []int64{4 << 10, 8 << 10, 8 << 10, 8 << 10, 33 << 10, 100}
	for i := range 20000 {
		k := chunkKey{object: "f", offset: rng.Int64N(400), length: 1}
		switch op := rng.IntN(10); {
		case op < 4:
			if e := c.lookup(k, &src); e != nil {
				if !live[e] || !e.published || e.key != k {
					t.Fatalf("lookup returned an entry that is not live and published under its key")
				}
				pinned = append(pinned, e)
			}
		case op < 8:
			e := c.reserve(k, src, sizes[rng.IntN(len(sizes))])
			if e == nil {
				continue
			}
			live[e] = true
			if rng.IntN(8) == 0 {
				c.drop(e)
				delete(live, e)
				continue
			}
			c.publish(e)
			if !e.published { // a duplicate of a published key
				delete(live, e)
			}
		default:
			if len(pinned) > 0 {
				n := rng.IntN(len(pinned))
				c.release(pinned[n])
				pinned = slices.Delete(pinned, n, n+1)
			}
		}
		// Evicted entries have left the map: drop them from live.
		for e := range live {
			if e.published && c.entries[e.key] != e {
				if e.pins > 0 {
					t.Fatalf("op %d: a pinned entry was evicted", i)
				}
				delete(live, e)
			}
		}
		checkRegion(t, c, live)
	}
	st := stats.Stats
	if st.ChunkCacheEvictions == 0 || st.ChunkCacheHits == 0 || st.ChunkCacheMisses == 0 {
		t.Errorf("stats %d hits, %d misses, %d evictions: want all positive", st.ChunkCacheHits, st.ChunkCacheMisses, st.ChunkCacheEvictions)
	}
	if st.ChunkCacheBytes != c.held || c.held > c.size {
		t.Errorf("ChunkCacheBytes %d, held %d, region %d", st.ChunkCacheBytes, c.held, c.size)
	}
	for _, e := range pinned {
		c.release(e)
	}
	if c.size > 0 && c.reserve(chunkKey{object: "big"}, src, c.size) == nil {
		t.Error("with nothing pinned, a chunk of the whole region found no room")
	}
	if c.reserve(chunkKey{object: "too big"}, src, c.size+1) != nil {
		t.Error("a chunk larger than the region was given room")
	}
}

// TestChunkCacheLayoutMismatch: an entry is only served to a job whose
// chunk has its layout.
func TestChunkCacheLayoutMismatch(t *testing.T) {
	c := newChunkCache(1<<20, false, new(statsSink))
	k := chunkKey{object: "f", length: 128}
	e := c.reserve(k, ptx.Source{Dtype: ptx.Uint16, Shape: []int{8, 8}}, 128)
	c.publish(e)
	if c.lookup(k, &ptx.Source{Dtype: ptx.Int16, Shape: []int{8, 8}}) != nil {
		t.Error("an int16 chunk was served a uint16 entry")
	}
	if c.lookup(k, &ptx.Source{Dtype: ptx.Uint16, Shape: []int{8, 8}, Strides: []int{1, 8}}) != nil {
		t.Error("an F-order chunk was served a C-order entry")
	}
	if got := c.lookup(k, &ptx.Source{Dtype: ptx.Uint16, Shape: []int{8, 8}}); got != e {
		t.Error("the matching chunk missed")
	}
}

// cacheCases are arrays for the chunk cache's end-to-end tests: several
// codecs, data types (so several chunk sizes), layouts and stores.
func cacheCases() []storeCase {
	return []storeCase{
		{"zstd-u16-sharded", writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16}, ShardShape: []int64{32, 32, 64},
			DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3}, SkipEmptyChunks: true}},
		{"blosc-f32-index-start", writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16}, ShardShape: []int64{32, 64, 32}, IndexAtStart: true,
			DataType: zarr.Float32, Compression: writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.ByteShuffle}}},
		{"lz4-f64-be", writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16}, BigEndian: true,
			DataType: zarr.Float64, Compression: writer.Compression{Codec: writer.LZ4}}},
		{"raw-i8-v2-F", writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16}, Format: 2, Order: 'F',
			DataType: zarr.Int8, Compression: writer.Compression{}}},
		{"blosc-zstd-u16-bitshuffle", writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16}, ShardShape: []int64{64, 32, 32},
			DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Blosc, Level: 3, BloscCompressor: blosc.Zstd, Shuffle: blosc.BitShuffle}}},
	}
}

// writeCacheCases writes cacheCases under dir and returns their paths.
func writeCacheCases(t *testing.T, dir string, seed uint64) []string {
	t.Helper()
	var paths []string
	for i, sc := range cacheCases() {
		paths = append(paths, writeCase(t, dir, sc, seed+uint64(i)))
	}
	return paths
}

// epochSamples draws n random boxes over paths (one epoch) and repeats
// them epochs times, each later epoch in another order.
func epochSamples(t *testing.T, rng *rand.Rand, paths []string, ext []int, n, epochs int) [][]Sample {
	t.Helper()
	var first []Sample
	for i := range n {
		path := paths[i%len(paths)]
		a, err := zarr.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, Sample{URI: path, Box: randomBox(rng, a.Shape(), ext)})
	}
	out := [][]Sample{first}
	for range epochs - 1 {
		e := slices.Clone(first)
		rng.Shuffle(len(e), func(i, j int) { e[i], e[j] = e[j], e[i] })
		out = append(out, e)
	}
	return out
}

// epochRun is what streaming some epochs through one pipeline gave.
type epochRun struct {
	batches [][]byte // every batch's bytes, in order
	stats   []Stats  // per epoch (the counters reset between epochs)
	peak    int64    // the largest Stats.ChunkCacheBytes seen at a pop
}

// runEpochs streams the epochs through p, one after the other (each
// flushed and popped before the next is pushed, so that a later epoch is
// planned once the earlier ones are cached).
func runEpochs(t *testing.T, p *Pipeline, epochs [][]Sample) epochRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var r epochRun
	for _, samples := range epochs {
		p.StatsReset()
		pushAll(t, p, samples...)
		for got := 0; got < len(samples); {
			b, err := p.Pop(ctx)
			if err != nil {
				t.Fatalf("Pop: %v", err)
			}
			buf := make([]byte, b.tensors[0].slot.bytes(b.Len()))
			if err := b.CopyToHost(buf); err != nil {
				t.Fatal(err)
			}
			r.batches = append(r.batches, buf)
			got += b.Len()
			b.Release()
			r.peak = max(r.peak, p.Stats().ChunkCacheBytes)
		}
		r.stats = append(r.stats, p.Stats())
	}
	return r
}

// compareRuns requires every batch of got to equal want's.
func compareRuns(t *testing.T, got, want epochRun, epochs [][]Sample, batchSize int) {
	t.Helper()
	if len(got.batches) != len(want.batches) {
		t.Fatalf("%d batches, want %d", len(got.batches), len(want.batches))
	}
	var samples []Sample
	for _, e := range epochs {
		for i := 0; i < len(e); i += batchSize {
			samples = append(samples, e[i])
		}
	}
	for i := range got.batches {
		if !bytes.Equal(got.batches[i], want.batches[i]) {
			t.Fatalf("batch %d (first sample %s) differs: %s", i, samples[i], firstDiff(got.batches[i], want.batches[i], 1))
		}
	}
}

// TestChunkCacheHostEpochs streams three epochs of the same random boxes
// over several codecs and data types through the host engine, with a
// chunk cache that holds everything, with one too small for it
// (evictions), and without: the batches are the same; with the big cache
// the later epochs read and decode nothing, with the small one they still
// hit, and the cache never holds more than its budget.
func TestChunkCacheHostEpochs(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	paths := writeCacheCases(t, dir, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	ext := []int{20, 24, 17}
	epochs := epochSamples(t, rng, paths, ext, 30, 3)
	cfg := Config{BatchSize: 4, SampleShape: ext, Device: "cpu", HostBufferBytes: 3 << 20, DeviceBufferBytes: 1 << 20,
		MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2, ChunkCacheBytes: -1}
	want := runEpochs(t, newChecked(t, cfg), epochs)
	for _, size := range []int64{64 << 20, 1 << 20} {
		t.Run(fmt.Sprintf("cache=%dMiB", size>>20), func(t *testing.T) {
			c := cfg
			c.ChunkCacheBytes = size
			got := runEpochs(t, newChecked(t, c), epochs)
			compareRuns(t, got, want, epochs, cfg.BatchSize)
			checkCacheStats(t, got, size, size >= 16<<20)
		})
	}
}

// TestChunkCacheCUDAEpochs is TestChunkCacheHostEpochs on the CUDA
// engine, with and without nvCOMP: its batches, with a chunk cache that
// holds the dataset, with one too small for it and without, equal the
// host engine's bit for bit; the cache is committed GPU memory and within
// its budget.
func TestChunkCacheCUDAEpochs(t *testing.T) {
	cudatest.MustHaveGPU(t)
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	paths := writeCacheCases(t, dir, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	ext := []int{20, 24, 17}
	// Twenty batches an epoch: a wave carries up to four of these small
	// batches, so a dozen may be in flight, their chunk cache hits pinned;
	// the small cache must still turn over within an epoch.
	epochs := epochSamples(t, rng, paths, ext, 120, 3)
	for _, out := range []Dtype{F32, BF16} {
		cfg := Config{BatchSize: 6, SampleShape: ext, Dtype: out, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 64 << 10}
		hcfg := cfg
		hcfg.Device, hcfg.ChunkCacheBytes = "cpu", -1
		want := runEpochs(t, newChecked(t, hcfg), epochs)
		for _, nv := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/nvcomp=%v", out, nv), func(t *testing.T) {
				plain := newCUDAPipeline(t, cfg, nv)
				compareRuns(t, runEpochs(t, plain, epochs), want, epochs, cfg.BatchSize)
				for _, size := range []int64{64 << 20, 1 << 20} {
					c := cfg
					c.ChunkCacheBytes = size
					p := newCUDAPipeline(t, c, nv)
					if d := p.Stats().GPUBytesCommitted - plain.Stats().GPUBytesCommitted; d != size {
						t.Errorf("a chunk cache of %d bytes commits %d more bytes of GPU memory", size, d)
					}
					got := runEpochs(t, p, epochs)
					compareRuns(t, got, want, epochs, cfg.BatchSize)
					checkCacheStats(t, got, size, size >= 16<<20)
					p.Close()
				}
			})
		}
	}
	_, err := New(Config{SampleShape: ext, Device: "cuda", HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 64 << 10,
		ChunkCacheBytes: 64 << 20, MaxGPUMemoryBytes: 48 << 20})
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "ChunkCacheBytes") {
		t.Errorf("New with a chunk cache above MaxGPUMemoryBytes: %v; want ErrBudget naming ChunkCacheBytes", err)
	}
}

// newCUDAPipeline starts a pipeline on the CUDA engine of GPU 0, with or
// without nvCOMP (with it, on the GPU host, nvCOMP must load), closed at
// the end of the test.
func newCUDAPipeline(t *testing.T, cfg Config, withNVCOMP bool) *Pipeline {
	t.Helper()
	if withNVCOMP {
		_, err := nvcomp.Load()
		cudatest.RequireNVCOMP(t, err)
	}
	cfg.Device = "cuda"
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	stats := new(statsSink)
	e, err := newCUDAEngine(cfg, 0, stats, withNVCOMP)
	if err != nil {
		t.Fatal(err)
	}
	p, err := start(cfg, e, stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// checkCacheStats checks a cached run's statistics: the first epoch
// misses, the later ones hit (all of them when the cache holds
// everything), and the cache stays within its budget.
func checkCacheStats(t *testing.T, r epochRun, budget int64, holdsAll bool) {
	t.Helper()
	for i, st := range r.stats {
		t.Logf("epoch %d: %d hits, %d misses, %d evictions, %d chunks decoded, %d bytes read, cache holds %d bytes",
			i+1, st.ChunkCacheHits, st.ChunkCacheMisses, st.ChunkCacheEvictions, st.ChunksDecoded, st.BytesRead, st.ChunkCacheBytes)
		if st.ChunkCacheBytes > budget {
			t.Errorf("epoch %d: the cache holds %d bytes, above its %d", i+1, st.ChunkCacheBytes, budget)
		}
	}
	if r.peak > budget {
		t.Errorf("the cache held %d bytes at a pop, above its %d", r.peak, budget)
	}
	// The CUDA engine reads raw chunks in place: they miss without being
	// decoded.
	if first := r.stats[0]; first.ChunkCacheMisses == 0 || first.ChunksDecoded > first.ChunkCacheMisses {
		t.Errorf("epoch 1: %d misses, %d chunks decoded: want misses, and no chunk decoded but those", first.ChunkCacheMisses, first.ChunksDecoded)
	}
	for i, st := range r.stats[1:] {
		switch {
		case st.ChunkCacheHits == 0:
			t.Errorf("epoch %d: no chunk cache hits", i+2)
		case holdsAll && (st.ChunkCacheMisses != 0 || st.ChunksDecoded != 0 || st.BytesRead != 0):
			t.Errorf("epoch %d: %d misses, %d chunks decoded, %d bytes read; with a cache that holds the dataset, want none", i+2, st.ChunkCacheMisses, st.ChunksDecoded, st.BytesRead)
		case !holdsAll && st.ChunkCacheEvictions == 0:
			t.Errorf("epoch %d: a cache smaller than the dataset evicted nothing", i+2)
		}
	}
}

// TestChunkCacheRewrittenShard rewrites a shard (new content, replaced by
// a rename or overwritten in place) while a pipeline with a chunk cache
// has its chunks cached: the next batch reads the new content.
func TestChunkCacheRewrittenShard(t *testing.T) {
	for _, dev := range []string{"cpu", "cuda"} {
		for _, how := range []string{"rename", "in place"} {
			t.Run(dev+"/"+how, func(t *testing.T) {
				if dev == "cuda" {
					cudatest.MustHaveGPU(t)
				}
				testRewrittenShard(t, dev, how == "rename")
			})
		}
	}
}

func testRewrittenShard(t *testing.T, dev string, rename bool) {
	dir := t.TempDir()
	spec := writer.Spec{Shape: []int64{64, 64}, ChunkShape: []int64{16, 16}, ShardShape: []int64{32, 32},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}
	path := writeCase(t, dir, storeCase{"a", spec}, 1)
	// The same array with other content, compressed harder: its shards'
	// chunks lie elsewhere, so a stale shard index would read garbage.
	spec.Compression.Level = 19
	other := writeCase(t, dir, storeCase{"b", spec}, 2)
	cfg := Config{BatchSize: 2, SampleShape: []int{20, 20}, Device: dev, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20,
		MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2, ChunkCacheBytes: 4 << 20}
	p := newChecked(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	samples := []Sample{{URI: path, Box: []Range{{Start: 2, Stop: 22}, {Start: 3, Stop: 23}}}, {URI: path, Box: []Range{{Start: -4, Stop: 16}, {Start: 20, Stop: 40}}}}
	check := func(when string) Stats {
		t.Helper()
		p.StatsReset()
		if err := p.Push(samples...); err != nil {
			t.Fatal(err)
		}
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		have := make([]byte, b.tensors[0].slot.bytes(b.Len()))
		if err := b.CopyToHost(have); err != nil {
			t.Fatal(err)
		}
		a, err := zarr.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		per := len(have) / b.Len()
		for i, s := range samples {
			reg, err := a.ReadRegion(s.Box)
			if err != nil {
				t.Fatal(err)
			}
			if want := expected(reg, F32); !bytes.Equal(have[i*per:(i+1)*per], want) {
				t.Fatalf("%s: sample %s: %s", when, s, firstDiff(have[i*per:(i+1)*per], want, 4))
			}
		}
		return p.Stats()
	}
	check("first read")
	if st := check("second read"); st.ChunkCacheHits == 0 || st.ChunkCacheMisses != 0 || st.BytesRead != 0 {
		t.Fatalf("second read: %d hits, %d misses, %d bytes read; want all hits", st.ChunkCacheHits, st.ChunkCacheMisses, st.BytesRead)
	}
	// Shard c/0/0 holds every chunk of the first sample.
	shard := filepath.Join(path, "c", "0", "0")
	data, err := os.ReadFile(filepath.Join(other, "c", "0", "0"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) == len(data) {
		t.Fatal("the two arrays' shards are the same size: the test would not see a stale shard index")
	}
	if rename {
		tmp := shard + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, shard); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(shard, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Coarse file system clocks may leave the modification time as it
	// was; the pipeline cannot see that change, so make it visible.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(shard, future, future); err != nil {
		t.Fatal(err)
	}
	if st := check("after the rewrite"); st.ChunkCacheMisses == 0 || st.BytesRead == 0 {
		t.Fatalf("after the rewrite: %d misses, %d bytes read; want the rewritten shard read", st.ChunkCacheMisses, st.BytesRead)
	}
	if st := check("after the rewrite, again"); st.ChunkCacheMisses != 0 {
		t.Fatalf("the rewritten shard's chunks were not cached: %d misses", st.ChunkCacheMisses)
	}
}

// TestChunkCacheSecondMiss: the default cache admits a chunk at its
// second miss while the first is remembered, remembers misses of at most
// its size in decoded bytes, and keeps its queue compact.
func TestChunkCacheSecondMiss(t *testing.T) {
	c := newChunkCache(1<<20, true, new(statsSink))
	key := func(i int) chunkKey { return chunkKey{object: fmt.Sprint("chunk", i), length: 100} }
	if c.admit(key(0), 256<<10) {
		t.Fatal("a first miss was admitted")
	}
	if !c.admit(key(0), 256<<10) {
		t.Fatal("a second miss was not admitted")
	}
	if c.admit(key(0), 256<<10) {
		t.Fatal("a miss after an admission was admitted: it should be remembered afresh")
	}
	// Four more misses of 256 KiB: five remembered would be 1.25 MiB, so
	// the oldest (chunk 0) is forgotten.
	for i := 1; i <= 4; i++ {
		if c.admit(key(i), 256<<10) {
			t.Fatalf("chunk %d admitted at its first miss", i)
		}
	}
	if c.admit(key(0), 256<<10) {
		t.Error("chunk 0 admitted after being forgotten")
	}
	if !c.admit(key(4), 256<<10) {
		t.Error("chunk 4, remembered, not admitted")
	}
	// Many small misses: the queue stays bounded by the cache's size in
	// bytes and compacts its head.
	for i := range 20000 {
		c.admit(key(100+i), 100)
	}
	if live := len(c.misses.queue) - c.misses.head; c.misses.bytes > c.size || live > 2*(int(c.size)/100)+1 || len(c.misses.seq) > live {
		t.Errorf("after 20000 misses: %d bytes remembered of %d, %d queued, %d keys", c.misses.bytes, c.size, live, len(c.misses.seq))
	}
	if len(c.misses.queue) > 2*(len(c.misses.queue)-c.misses.head)+1024 {
		t.Errorf("queue of %d holds %d live misses: not compacted", len(c.misses.queue), len(c.misses.queue)-c.misses.head)
	}
	// A cache of a size set takes every miss.
	if !newChunkCache(1<<20, false, new(statsSink)).admit(key(0), 100) {
		t.Error("a cache of a size set refused a first miss")
	}
}

// TestChunkCacheDefault: with Config.ChunkCacheBytes 0 the host engine
// keeps a cache that takes a compressed chunk at its second miss and
// never a raw one, and the CUDA engine none; -1 is none. The same batch
// read three times: once it caches nothing, twice it is cached, the third
// time every chunk hits; every batch equals the uncached engine's.
func TestChunkCacheDefault(t *testing.T) {
	if size, second := (Config{}).chunkCache(false); memoryLimit() >= 64<<20 && (!second || size < 1<<20 || size > maxDefaultChunkCache) {
		t.Errorf("default host cache: %d bytes, second miss %v", size, second)
	}
	for _, c := range []Config{{}, {ChunkCacheBytes: -1}} {
		if size, _ := c.chunkCache(true); size != 0 {
			t.Errorf("CUDA engine, ChunkCacheBytes %d: a cache of %d bytes", c.ChunkCacheBytes, size)
		}
	}
	if size, _ := (Config{ChunkCacheBytes: -1}).chunkCache(false); size != 0 {
		t.Errorf("host engine, ChunkCacheBytes -1: a cache of %d bytes", size)
	}
	if one, _ := (Config{}).chunkCache(false); one >= 2<<20 {
		two, _ := (Config{Sources: []Source{{Name: "image"}, {Name: "label"}}}).chunkCache(false)
		if two != one/2 {
			t.Errorf("default cache with two sources: %d bytes each, want half of %d", two, one)
		}
	}
	if size, second := (Config{ChunkCacheBytes: 8 << 20}).chunkCache(true); size != 8<<20 || second {
		t.Errorf("a size set: %d bytes, second miss %v", size, second)
	}
	for _, c := range []struct {
		memory int64
		ranks  string
		want   int64
	}{{16 << 30, "", 1 << 30}, {16 << 30, "4", 256 << 20}, {16 << 30, "x", 1 << 30}, {1 << 40, "", maxDefaultChunkCache}, {1 << 40, "8", maxDefaultChunkCache}, {512 << 30, "8", maxDefaultChunkCache}, {256 << 30, "8", 2 << 30}} {
		loaders := LoadersPerHost(func(k string) string { return map[string]string{"LOCAL_WORLD_SIZE": c.ranks}[k] })
		if got := defaultChunkCache(c.memory, loaders); got != c.want {
			t.Errorf("defaultChunkCache(%d, LOCAL_WORLD_SIZE %q) = %d, want %d", c.memory, c.ranks, got, c.want)
		}
	}
	if memoryLimit() < 64<<20 {
		t.Skip("the host's memory is unknown here: no default cache")
	}
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	paths := writeCacheCases(t, dir, seed)
	var compressed, raw []string
	for i, sc := range cacheCases() {
		if sc.spec.Compression == (writer.Compression{}) {
			raw = append(raw, paths[i])
		} else {
			compressed = append(compressed, paths[i])
		}
	}
	rng := rand.New(rand.NewPCG(seed, 12))
	ext := []int{20, 24, 17}
	// One batch of one box from each compressed array: no chunk twice.
	batch := epochSamples(t, rng, compressed, ext, len(compressed), 1)[0]
	epochs := [][]Sample{batch, batch, batch}
	cfg := Config{BatchSize: len(batch), SampleShape: ext, Device: "cpu", HostBufferBytes: 3 << 20, DeviceBufferBytes: 1 << 20,
		MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2}
	off := cfg
	off.ChunkCacheBytes = -1
	want := runEpochs(t, newChecked(t, off), epochs)
	if st := want.stats[2]; st.ChunkCacheHits+st.ChunkCacheMisses != 0 {
		t.Errorf("ChunkCacheBytes -1: %d hits, %d misses", st.ChunkCacheHits, st.ChunkCacheMisses)
	}
	got := runEpochs(t, newChecked(t, cfg), epochs)
	compareRuns(t, got, want, epochs, cfg.BatchSize)
	first, second, third := got.stats[0], got.stats[1], got.stats[2]
	t.Logf("misses %d %d %d, hits %d %d %d, cached bytes %d %d %d", first.ChunkCacheMisses, second.ChunkCacheMisses, third.ChunkCacheMisses,
		first.ChunkCacheHits, second.ChunkCacheHits, third.ChunkCacheHits, first.ChunkCacheBytes, second.ChunkCacheBytes, third.ChunkCacheBytes)
	switch {
	case first.ChunkCacheMisses == 0 || first.ChunkCacheHits != 0 || first.ChunkCacheBytes != 0:
		t.Error("read once: want misses, no hits and nothing cached")
	case second.ChunkCacheHits != 0 || second.ChunkCacheMisses != first.ChunkCacheMisses || second.ChunkCacheBytes == 0:
		t.Error("read twice: want the same misses again, no hits, and the chunks cached")
	case third.ChunkCacheMisses != 0 || third.ChunkCacheHits != first.ChunkCacheMisses || third.ChunksDecoded != 0:
		t.Error("read a third time: want every chunk a hit, none decoded")
	}
	// Raw chunks are read in place: the default cache never looks them up,
	// a shard's raw inner chunks included.
	raw = append(raw, writeCase(t, dir, storeCase{"raw-u16-sharded", writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16},
		ShardShape: []int64{32, 32, 64}, DataType: zarr.Uint16}}, seed+100))
	rawBatch := epochSamples(t, rng, raw, ext, 4, 1)[0]
	cfg.BatchSize = len(rawBatch)
	for i, st := range runEpochs(t, newChecked(t, cfg), [][]Sample{rawBatch, rawBatch, rawBatch}).stats {
		if st.ChunkCacheHits+st.ChunkCacheMisses != 0 || st.ChunkCacheBytes != 0 {
			t.Errorf("raw chunks, read %d times: %d hits, %d misses, %d bytes cached", i+1, st.ChunkCacheHits, st.ChunkCacheMisses, st.ChunkCacheBytes)
		}
	}
}

// TestChunkCacheHostMemory: the host engine's chunk cache is host memory,
// outside GPUBytesCommitted, and holds nothing before a batch.
func TestChunkCacheHostMemory(t *testing.T) {
	p, err := New(Config{SampleShape: []int{8, 8}, Device: "cpu", ChunkCacheBytes: 1 << 20, HostBufferBytes: 4 << 20, DeviceBufferBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st := p.Stats(); st.GPUBytesCommitted != 0 || st.ChunkCacheBytes != 0 {
		t.Errorf("host engine with a chunk cache: %d GPU bytes committed, cache holds %d", st.GPUBytesCommitted, st.ChunkCacheBytes)
	}
}

// TestCacheCopies: the CUDA engine's copies into the chunk cache merge
// chunks that follow one another both in the wave buffer and in the
// cache, and never write past an entry's end.
func TestCacheCopies(t *testing.T) {
	c := newChunkCache(1<<20, false, new(statsSink))
	jobOf := func(n int) *job {
		return &job{layout: zarr.Layout{DataType: zarr.Uint8, Shape: []int64{int64(n)}, Strides: []int64{1}}}
	}
	src := ptx.Source{Dtype: ptx.Uint8, Shape: []int{1}}
	var ins []cacheInsert
	add := func(srcOff int64, n int) {
		e := c.reserve(chunkKey{object: fmt.Sprint(len(ins))}, src, int64(n))
		ins = append(ins, cacheInsert{job: jobOf(n), entry: e, src: srcOff})
	}
	add(4096, 300)     // entry [0, 512)
	add(4096+512, 100) // entry [512, 768): follows in both
	add(9000, 256)     // entry [768, 1024): not after the last in the buffer
	add(9256, 10)      // entry [1024, 1280): follows
	// Out of order: the merge sorts by source.
	ins[0], ins[2] = ins[2], ins[0]
	got := cacheCopies(ins)
	want := []deviceCopy{{src: 4096, dst: 0, n: 512 + 100}, {src: 9000, dst: 768, n: 256 + 10}}
	if !slices.Equal(got, want) {
		t.Fatalf("cacheCopies = %+v, want %+v", got, want)
	}
}
