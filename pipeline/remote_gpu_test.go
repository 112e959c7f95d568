package pipeline

import (
	"testing"

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
	cudatest.MustHaveGPU(t)
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	names := writeRemoteCases(t, dir, seed)
	srv := remotetest.NewFaultServer(t, dir, false)
	srv.Inject(remotetest.Fault{Kind: remotetest.Status503, Path: "zstd", Method: "GET", Times: 3})
	srv.Inject(remotetest.Fault{Kind: remotetest.Reset, Path: "blosc", Method: "GET", Times: 2})
	cfg := remoteConfig()
	cfg.IOConcurrency = 3
	cfg.HostBufferBytes = 4 << 20 // the CUDA engine's three slabs, each above a chunk's need
	cfg.Remote.HTTPClient = srv.Client()
	samples := remoteSamples(t, dir, names, cfg.SampleShape, 90, seed)
	st := runBothOn(t, cfg, samples, rebase(samples, dir, srv.URL), true)
	t.Logf("%d waves (%d shared) for %d batches, %d requests (%d retries), at most %d at once",
		st.WavesEmitted, st.WavesShared, st.BatchesEmitted, st.RemoteRequests, st.RemoteRetries, srv.MaxInFlight())
	if st.WavesEmitted < 4 || st.RemoteRetries < 5 {
		t.Errorf("%d waves, %d retries: want several waves and the 5 injected faults retried", st.WavesEmitted, st.RemoteRetries)
	}
}
