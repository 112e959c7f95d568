package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// fixtureDir holds stores written by zarr-python and tensorstore
// (README.md there lists them).
const fixtureDir = "../testdata"

// fixtures returns the committed independent-writer stores (arrays only)
// with a box shape for each.
func fixtures(t *testing.T) map[string][]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m []struct {
		Name  string `json:"name"`
		Path  string `json:"path"`
		Level *int   `json:"ngff_level"`
		Error string `json:"error"` // a store damacy must refuse
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for _, f := range m {
		if f.Level != nil || f.Error != "" {
			continue
		}
		path := filepath.Join(fixtureDir, f.Path)
		a, err := zarr.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		ext := make([]int, a.Rank())
		for k, n := range a.Shape() {
			ext[k] = int(max(1, min(n*2/3, 13)))
		}
		out[path] = ext
	}
	if len(out) == 0 {
		t.Fatal("no fixtures")
	}
	return out
}

// TestHostEngineFixtures reads the stores of zarr-python and tensorstore
// through the host engine and compares with the reference reader.
func TestHostEngineFixtures(t *testing.T) {
	for path, ext := range fixtures(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cfg := Config{BatchSize: 4, SampleShape: ext, Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20,
				MaxChunkBytes: 256 << 10, ComputeThreads: 2, IOThreads: 2}
			checkEngine(t, cfg, []string{path}, 40, zarrtest.Seed(t))
		})
	}
}

// TestCUDAEngineFixtures compares the CUDA engine with the host engine on
// the same stores. tensorstore's zstd frames carry no content size, so
// nvCOMP must refuse them and the CPU decode them (the spill path, then
// the array is planned for the CPU).
func TestCUDAEngineFixtures(t *testing.T) {
	cudatest.MustHaveGPU(t)
	for path, ext := range fixtures(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			rng := newTestRand(t)
			a, err := zarr.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			var samples []Sample
			for range 64 {
				samples = append(samples, Sample{URI: path, Box: randomBox(rng, a.Shape(), ext)})
			}
			for _, out := range []Dtype{F32, BF16} {
				cfg := Config{BatchSize: 8, SampleShape: ext, Dtype: out, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 1 << 20}
				st := runBoth(t, cfg, samples, true)
				t.Logf("%s %s: %d chunks decoded, %d by nvCOMP", filepath.Base(path), out, st.ChunksDecoded, st.ChunksGPU)
			}
		})
	}
}
