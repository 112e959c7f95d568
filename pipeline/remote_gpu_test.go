package pipeline

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// TestCUDARemoteWaves reads random boxes over http:// with the CUDA engine,
// whose waves of remote reads overlap (a wave's GETs start while the one
// before still has GETs out, and a wave's parts are read at once), through
// a server that fails some requests on the way, and requires the batches
// of the host engine reading the local files, bit for bit.
func TestCUDARemoteWaves(t *testing.T) {
	srv, cfg, samples, dir := cudaRemoteSetup(t, 90)
	srv.Inject(remotetest.Fault{Kind: remotetest.Status503, Path: "zstd", Method: "GET", Times: 3})
	srv.Inject(remotetest.Fault{Kind: remotetest.Reset, Path: "blosc", Method: "GET", Times: 2})
	st := runBothOn(t, cfg, samples, rebase(samples, dir, srv.URL), true)
	t.Logf("%d waves (%d shared) for %d batches, %d requests (%d retries), at most %d at once",
		st.WavesEmitted, st.WavesShared, st.BatchesEmitted, st.RemoteRequests, st.RemoteRetries, srv.MaxInFlight())
	if st.WavesEmitted < 4 || st.RemoteRetries < 5 {
		t.Errorf("%d waves, %d retries: want several waves and the 5 injected faults retried", st.WavesEmitted, st.RemoteRetries)
	}
}

// TestCUDARemoteClose closes a CUDA pipeline while its waves wait on GETs
// that the server never answers (the boxes read once, so that metadata
// and shard indexes are cached, then again with every sharded chunk GET
// stalled): Close returns promptly, a Pop waiting ends with ErrShutdown,
// and no goroutine is left behind.
func TestCUDARemoteClose(t *testing.T) {
	srv, cfg, local, dir := cudaRemoteSetup(t, 36)
	cfg.Device = "cuda"
	samples := rebase(local, dir, srv.URL)
	before := runtime.NumGoroutine()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pushAll(t, p, samples...)
	for got := 0; got < len(samples); {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += b.Len()
		b.Release()
	}
	srv.Inject(remotetest.Fault{Kind: remotetest.Stall, Path: "/c/", Method: "GET"})
	pushAll(t, p, samples...)
	popped := make(chan error, 1)
	var after atomic.Int64 // batches that came all the same (their GETs were out before the stall)
	go func() {
		for {
			b, err := p.Pop(ctx)
			if err != nil {
				popped <- err
				return
			}
			after.Add(1)
			b.Release()
		}
	}()
	time.Sleep(500 * time.Millisecond) // the waves' GETs are out, stalled
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return within 15 s with GETs stalled")
	}
	t.Logf("Close took %v; %d of %d batches came after the stall", time.Since(start), after.Load(), len(samples)/cfg.BatchSize)
	select {
	case err := <-popped:
		if !errors.Is(err, ErrShutdown) {
			t.Errorf("Pop after Close: %v, want ErrShutdown", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Pop still waiting 15 s after Close")
	}
	if n := after.Load(); n >= int64(len(samples)/cfg.BatchSize) {
		t.Errorf("all %d batches came with the chunk GETs stalled: the stall did not hold a wave", n)
	}
	srv.Client().CloseIdleConnections()
	checkGoroutines(t, before)
}

// cudaRemoteSetup skips without a GPU; it writes the remote cases into a
// directory that a fault server serves, and returns the server, a Config
// reading through it (3 GETs in flight; staging slabs that the CUDA engine
// accepts) and n random boxes as samples of the local files.
func cudaRemoteSetup(t *testing.T, n int) (*remotetest.FaultServer, Config, []Sample, string) {
	t.Helper()
	cudatest.MustHaveGPU(t)
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	names := writeRemoteCases(t, dir, seed)
	srv := remotetest.NewFaultServer(t, dir, false)
	cfg := remoteConfig()
	cfg.IOConcurrency = 3
	cfg.HostBufferBytes = 4 << 20 // the CUDA engine's three slabs, each above a chunk's need
	cfg.Remote.HTTPClient = srv.Client()
	return srv, cfg, remoteSamples(t, dir, names, cfg.SampleShape, n, seed), dir
}
