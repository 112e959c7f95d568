package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// remoteCases are the arrays of the object-store tests: several codecs,
// sharded with the index at the end and at the start, unsharded, zarr v2,
// and an OME-NGFF image.
var remoteCases = []storeCase{
	{"zstd-end", writer.Spec{Shape: []int64{40, 36, 30}, ChunkShape: []int64{8, 8, 8}, ShardShape: []int64{16, 16, 16},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3}, SkipEmptyChunks: true}},
	{"blosc-start", writer.Spec{Shape: []int64{33, 40, 24}, ChunkShape: []int64{8, 8, 8}, ShardShape: []int64{8, 16, 24}, IndexAtStart: true,
		DataType: zarr.Float32, Compression: writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.ByteShuffle}, SkipEmptyChunks: true}},
	{"gzip-unsharded", writer.Spec{Shape: []int64{30, 30, 20}, ChunkShape: []int64{10, 10, 10},
		DataType: zarr.Int8, Compression: writer.Compression{Codec: writer.Gzip, Level: 1}, SkipEmptyChunks: true}},
	{"v2-lz4", writer.Spec{Format: 2, Shape: []int64{25, 31, 17}, ChunkShape: []int64{8, 8, 8},
		DataType: zarr.Int32, Compression: writer.Compression{Codec: writer.LZ4}, SkipEmptyChunks: true}},
}

// writeRemoteCases writes remoteCases below dir and returns their names.
func writeRemoteCases(t *testing.T, dir string, seed uint64) []string {
	t.Helper()
	var names []string
	for i, sc := range remoteCases {
		writeCase(t, dir, sc, seed+uint64(i))
		names = append(names, sc.name)
	}
	return names
}

// remoteSamples draws n random boxes over the arrays (which may reach
// outside them), as samples of the local paths.
func remoteSamples(t *testing.T, dir string, names []string, ext []int, n int, seed uint64) []Sample {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	var out []Sample
	for i := range n {
		p := filepath.Join(dir, names[i%len(names)])
		a, err := zarr.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Sample{URI: p, Box: randomBox(rng, a.Shape(), ext)})
	}
	return out
}

// runBatches pushes samples through a pipeline of cfg and returns each
// batch's bytes, or the first error. It closes the pipeline, and the
// idle connections of cfg.Remote.HTTPClient, and checks that no goroutine
// is left behind.
func runBatches(t *testing.T, cfg Config, samples []Sample) ([][]byte, Stats, error) {
	t.Helper()
	before := runtime.NumGoroutine()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if n := p.Stats().SlotsInUse; n != 0 {
			t.Errorf("%d batch slots still in use at the end", n)
		}
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if c := cfg.Remote.HTTPClient; c != nil {
			c.CloseIdleConnections()
		}
		checkGoroutines(t, before)
	}()
	go func() {
		p.Push(samples...)
		p.Flush()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out [][]byte
	for got := 0; got < len(samples); {
		b, err := p.Pop(ctx)
		if err != nil {
			return out, p.Stats(), err
		}
		out = append(out, append([]byte(nil), b.Bytes()...))
		got += b.Len()
		b.Release()
	}
	return out, p.Stats(), nil
}

// compareRemote reads the samples from their local paths and again with
// each URI rebased from dir onto base, and requires identical batches.
func compareRemote(t *testing.T, cfg Config, samples []Sample, dir, base string) Stats {
	t.Helper()
	local, _, err := runBatches(t, cfg, samples)
	if err != nil {
		t.Fatalf("local: %v", err)
	}
	rs := rebase(samples, dir, base)
	got, st, err := runBatches(t, cfg, rs)
	if err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	if len(got) != len(local) {
		t.Fatalf("%d batches, %d from the local files", len(got), len(local))
	}
	for i := range got {
		if string(got[i]) != string(local[i]) {
			t.Fatalf("batch %d through %s differs from the local files: %s", i, base, firstDiff(got[i], local[i], cfg.Dtype.Size()))
		}
	}
	return st
}

func rebase(samples []Sample, dir, base string) []Sample {
	out := make([]Sample, len(samples))
	for i, s := range samples {
		rel, _ := filepath.Rel(dir, s.URI)
		s.URI = base + "/" + filepath.ToSlash(rel)
		out[i] = s
	}
	return out
}

func remoteConfig() Config {
	return Config{BatchSize: 6, SampleShape: []int{9, 11, 7}, Device: "cpu", HostBufferBytes: 2 << 20, DeviceBufferBytes: 1 << 20,
		MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2, IOConcurrency: 8,
		Remote: remote.Options{Attempts: 4, Backoff: time.Millisecond, Timeout: 10 * time.Second}}
}

// TestRemoteMinIO: batches read through s3:// from a MinIO server equal
// those read from the local files, on random boxes reaching outside the
// arrays, and again after a shard is deleted on both sides (fill).
func TestRemoteMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MinIO server")
	}
	m := remotetest.StartMinIO(t)
	m.CreateBucket(t, "data")
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	names := writeRemoteCases(t, dir, seed)
	m.Upload(t, dir, "s3://data/sets/one")
	cfg := remoteConfig()
	opts := m.Options()
	cfg.Remote.S3 = opts.S3
	samples := remoteSamples(t, dir, names, cfg.SampleShape, 48, seed)
	st := compareRemote(t, cfg, samples, dir, "s3://data/sets/one")
	t.Logf("%d requests, %d retries, %d read ops, %d bytes", st.RemoteRequests, st.RemoteRetries, st.ReadOps, st.BytesRead)
	if st.RemoteRequests == 0 || st.RemoteRetries != 0 {
		t.Errorf("stats: %d requests, %d retries", st.RemoteRequests, st.RemoteRetries)
	}

	// Delete a shard of the zstd array on both sides: it reads as fill.
	shard := "zstd-end/c/0/0/0"
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(shard))); err != nil {
		t.Fatal(err)
	}
	m.Delete(t, "data", "sets/one/"+shard)
	compareRemote(t, cfg, samples, dir, "s3://data/sets/one")
}

// TestRemoteGCS: the same through gs:// from the GCS emulator.
func TestRemoteGCS(t *testing.T) {
	g := remotetest.StartFakeGCS(t)
	g.CreateBucket(t, "data")
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	names := writeRemoteCases(t, dir, seed)
	g.Upload(t, dir, "gs://data/sets/one")
	cfg := remoteConfig()
	cfg.Remote.GCS = g.Options().GCS
	samples := remoteSamples(t, dir, names, cfg.SampleShape, 24, seed)
	if st := compareRemote(t, cfg, samples, dir, "gs://data/sets/one"); st.RemoteRequests == 0 || st.RemoteRetries != 0 {
		t.Errorf("stats: %d requests, %d retries", st.RemoteRequests, st.RemoteRetries)
	}
}

// TestRemoteHTTP: the same over http:// and https:// from Go's file server.
func TestRemoteHTTP(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	names := writeRemoteCases(t, dir, seed)
	cfg := remoteConfig()
	samples := remoteSamples(t, dir, names, cfg.SampleShape, 36, seed)
	for _, tls := range []bool{false, true} {
		srv := remotetest.NewFaultServer(t, dir, tls)
		c := cfg
		c.Remote.HTTPClient = srv.Client()
		compareRemote(t, c, samples, dir, srv.URL)
	}
}

// TestRemoteFaults runs the comparison through a server that fails in
// each recoverable way, and checks the unrecoverable ones: a 403 fails the
// batch with ErrStorage naming the URI, without retries; a missing shard
// reads as fill; a server slower than the deadline fails, without hanging.
func TestRemoteFaults(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	names := writeRemoteCases(t, dir, seed)
	cfg := remoteConfig()
	samples := remoteSamples(t, dir, names, cfg.SampleShape, 24, seed)
	recoverable := []remotetest.Fault{
		{Kind: remotetest.Status500, Times: 3},
		{Kind: remotetest.SlowDown, Times: 3},
		{Kind: remotetest.TooMany, Times: 2},
		{Kind: remotetest.Reset, Method: "GET", Times: 3},
		{Kind: remotetest.Truncate, Method: "GET", Times: 3},
		{Kind: remotetest.IgnoreRange},
		{Kind: remotetest.RefuseSuffix},
	}
	for _, f := range recoverable {
		t.Run(f.Kind.String(), func(t *testing.T) {
			srv := remotetest.NewFaultServer(t, dir, false)
			srv.Inject(f)
			st := compareRemote(t, cfg, samples, dir, srv.URL)
			if f.Times > 0 && st.RemoteRetries == 0 {
				t.Errorf("no retries counted (%d requests): %q", st.RemoteRequests, srv.Requests())
			}
		})
	}

	t.Run("403", func(t *testing.T) {
		srv := remotetest.NewFaultServer(t, dir, false)
		srv.Inject(remotetest.Fault{Kind: remotetest.Forbidden, Path: "zstd-end/c/1/0/0"})
		uri := srv.URL + "/zstd-end"
		_, _, err := runBatches(t, cfg, []Sample{{URI: uri, Box: []Range{{Start: 16, Stop: 25}, {Start: 0, Stop: 11}, {Start: 0, Stop: 7}}}})
		var pe *Error
		if !errors.Is(err, ErrStorage) || !errors.As(err, &pe) || pe.URI != uri || !strings.Contains(err.Error(), "403") {
			t.Fatalf("err = %v, want ErrStorage naming %s with the 403", err, uri)
		}
		zarrtest.CheckMessage(t, "a batch of a forbidden shard", err, uri, "c/1/0/0")
		if n := srv.Count("zstd-end/c/1/0/0"); n != 1 {
			t.Errorf("%d requests for the forbidden shard, want 1: %q", n, srv.Requests())
		}
	})

	t.Run("404 is fill", func(t *testing.T) {
		d := t.TempDir()
		for _, n := range names {
			if err := os.CopyFS(filepath.Join(d, n), os.DirFS(filepath.Join(dir, n))); err != nil {
				t.Fatal(err)
			}
		}
		for _, shard := range []string{"zstd-end/c/1/0/0", "blosc-start/c/1/1/0", "gzip-unsharded/c/1/1/1"} {
			if err := os.Remove(filepath.Join(d, filepath.FromSlash(shard))); err != nil {
				t.Fatal(err)
			}
		}
		srv := remotetest.NewFaultServer(t, d, false)
		compareRemote(t, cfg, rebase(samples, dir, d), d, srv.URL)
	})

	t.Run("slower than the deadline", func(t *testing.T) {
		srv := remotetest.NewFaultServer(t, dir, false)
		srv.Inject(remotetest.Fault{Kind: remotetest.Stall, Path: "/c/"})
		c := cfg
		c.Remote.Timeout, c.Remote.Attempts = 200*time.Millisecond, 2
		t0 := time.Now()
		_, _, err := runBatches(t, c, rebase(samples[:6], dir, srv.URL))
		if !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "sent no response within the response timeout of 200ms (after 2 attempts)") {
			t.Fatalf("err = %v, want ErrStorage saying the response timeout passed", err)
		}
		var pe *Error
		if errors.As(err, &pe) {
			zarrtest.CheckMessage(t, "a batch of a stalled server", err, pe.URI)
		}
		if d := time.Since(t0); d > 20*time.Second {
			t.Errorf("took %v", d)
		}
	})
}

// TestRemoteCoalescing: neighbouring chunks of one shard go out as one GET,
// with gaps up to plan.RemoteGapBytes, and as many GETs as needed past the span
// cap.
func TestRemoteCoalescing(t *testing.T) {
	src := &source{uri: "s3://b/a", obj: &remote.Store{}}
	other := &source{uri: "/local/a"}
	slab := make([]byte, 64<<20)
	reads := []readOp{
		{src: src, key: "k", offset: 0, length: 100, slabOff: 0},
		{src: src, key: "k", offset: 100 + plan.RemoteGapBytes, length: 100, slabOff: 256},           // gap at the cap: merged
		{src: src, key: "k", offset: 201 + 2*plan.RemoteGapBytes, length: 100, slabOff: 512},         // one byte more: a new GET
		{src: src, key: "k2", offset: 302 + 2*plan.RemoteGapBytes, length: 100, slabOff: 768},        // another object
		{src: other, key: "k2", offset: 0, length: 100, slabOff: 1024},                               // local
		{src: src, key: "k3", offset: 0, length: plan.RemoteSpanBytes - 10, slabOff: 2048},           // big
		{src: src, key: "k3", offset: plan.RemoteSpanBytes - 10, length: 10, slabOff: 2048 + 16<<20}, // fits the span exactly
		{src: src, key: "k3", offset: plan.RemoteSpanBytes, length: 1, slabOff: 3 << 24},             // past it
	}
	reqs, local := groupRemote(reads, slab, plan.GETMerge{Gap: plan.RemoteGapBytes, Span: plan.RemoteSpanBytes})
	var shape []string
	for _, q := range reqs {
		shape = append(shape, fmt.Sprintf("%s:%d:%d", q.key, len(q.ranges), q.bytes))
	}
	want := []string{"k:2:" + fmt.Sprint(200+plan.RemoteGapBytes), "k:1:100", "k2:1:100", "k3:2:" + fmt.Sprint(plan.RemoteSpanBytes), "k3:1:1"}
	if fmt.Sprint(shape) != fmt.Sprint(want) || len(local) != 1 || local[0] != reads[4] {
		t.Errorf("groupRemote = %v, local %v; want %v, [%v]", shape, local, want, reads[4])
	}
}
