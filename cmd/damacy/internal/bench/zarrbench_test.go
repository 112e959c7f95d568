package bench

import (
	"context"
	"github.com/damacy-go/damacy/pipeline"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// smallZarrbench loads the built-in zarrbench scenario of that name with its
// array shrunk to 64x128x256 (and its chunks, when unsharded, to 32x128x256:
// 2 MiB, four blosc blocks), keeping its values, codec and read method.
func smallZarrbench(t *testing.T, name string) *Scenario {
	t.Helper()
	sc, err := LoadScenario(name)
	if err != nil {
		t.Fatal(err)
	}
	d := &sc.Dataset
	if d.Values != ValuesZarrBenchmarks || d.Dtype[0] != "uint16" || !sc.Run.chunked() || sc.Run.Config.BatchSize != 4 || sc.Run.Config.Dtype != pipeline.F32 {
		t.Fatalf("%s: dataset %+v, run %+v: not the public benchmark's", name, *d, sc.Run)
	}
	if !slices.Equal(d.Shape, []int64{1024, 2048, 2048}) || !slices.Equal(sc.Run.shape(), []int64{256, 256, 256}) || sc.Run.Batches != 64 {
		t.Fatalf("%s: shape %v, boxes %v, %d batches; want 1024x2048x2048, 256^3 boxes, 64 batches of every chunk", name, d.Shape, sc.Run.Config.SampleShape, sc.Run.Batches)
	}
	d.Shape = []int64{64, 128, 256}
	if d.Shard == nil {
		d.Chunk = []int64{32, 128, 256}
	} else {
		d.Shard = []int64{64, 128, 128}
	}
	sc.Run.Config.SampleShape, sc.Run.Batches = nil, 0
	if err := sc.validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestZarrbenchScenarios generates small copies of the zarrbench scenarios'
// datasets, reads them every chunk once on the host engine (the first batch
// verified against the reference reader, the last one ragged), and has
// zarr-python read them and compare them with the benchmark's own values
// (its generator's numpy expression) and codecs.
func TestZarrbenchScenarios(t *testing.T) {
	dir := t.TempDir()
	var arrays []string
	for _, name := range []string{"zarrbench-uncompressed", "zarrbench-compressed", "zarrbench-sharded"} {
		sc := smallZarrbench(t, name)
		data := filepath.Join(dir, name)
		sc.Run.Engine = "host"
		// 4 chunks (or 2 shards): one batch of 4 (or a ragged one of 2).
		grid := sc.Dataset.gridChunk()
		chunks := int(gridChunks(sc.Dataset.Shape, grid))
		rep, _ := runScenario(t, sc, Options{Verify: true, Data: data})
		samples := rep.Stats.Counters["samples_emitted"]
		if rep.Sampler != BoxesChunks || samples != int64(chunks) || rep.Batches != (chunks+3)/4 || !rep.Verified {
			t.Errorf("%s: sampler %q, %d samples in %d batches, verified %v; want every one of %d chunks once", name, rep.Sampler, samples, rep.Batches, rep.Verified, chunks)
		}
		kind := "raw"
		if sc.Dataset.Codec[0] != "none" {
			kind = "compressed"
		}
		arrays = append(arrays, filepath.Join(data, ArrayName(0), "0")+":"+kind)
	}
	py := zarrtest.MustHavePython(t, "numpy", "zarr")
	out, err := exec.Command(py, append([]string{filepath.Join("testdata", "read_zarrbench.py")}, arrays...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("read_zarrbench.py: %v\n%s", err, out)
	}
	t.Logf("zarr-python:\n%s", out)
}

// TestArrayScenario reads an existing array and image as damacy bench
// ARRAY does: every chunk once by default, random boxes of a shape with
// --boxes, and the overrides.
func TestArrayScenario(t *testing.T) {
	dir := t.TempDir()
	gen := smallZarrbench(t, "zarrbench-sharded")
	if err := EnsureDataset(context.Background(), Env{Stderr: io.Discard}, &gen.Dataset, dir); err != nil {
		t.Fatal(err)
	}
	image, array := filepath.Join(dir, ArrayName(0)), filepath.Join(dir, ArrayName(0), "0")
	if !IsArray(image) || !IsArray(array) || IsArray(dir) || IsArray(filepath.Join(dir, "nope")) {
		t.Fatalf("IsArray: image %v, array %v, dataset dir %v", IsArray(image), IsArray(array), IsArray(dir))
	}
	for _, c := range []struct {
		path string
		ov   RunOverrides
		want func(*Report) bool
	}{
		{image, RunOverrides{Warmup: -1}, func(r *Report) bool {
			return r.Sampler == BoxesChunks && r.Batches == 1 && r.Stats.Counters["samples_emitted"] == 2 && slices.Equal(r.SampleShape, []int64{64, 128, 128})
		}},
		{array, RunOverrides{Boxes: "32,32,32", BatchSize: 3, Warmup: 1, Dtype: "bf16"}, func(r *Report) bool {
			// 64x128x256 voxels in boxes of 32^3, 3 per batch: 22 batches.
			return r.Sampler == "uniform" && r.Batches == 22 && r.Dtype == "bfloat16" && r.Warmup == 1
		}},
		{array, RunOverrides{Boxes: "chunks", BatchSize: 1, Batches: 1, Warmup: -1}, func(r *Report) bool {
			return r.Sampler == BoxesChunks && r.Batches == 1 && r.Stats.Counters["samples_emitted"] == 1
		}},
	} {
		sc, err := ArrayScenario(c.path, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.Override(c.ov); err != nil {
			t.Fatal(err)
		}
		sc.Run.Engine = "host"
		rep, _ := runScenario(t, sc, Options{Verify: true})
		if !c.want(rep) || !rep.Verified || rep.DatasetDir != c.path {
			t.Errorf("%s with %+v: sampler %q, %d batches of %v, %d samples, dtype %s, dataset %s, verified %v", c.path, c.ov, rep.Sampler, rep.Batches, rep.SampleShape, rep.Stats.Counters["samples_emitted"], rep.Dtype, rep.DatasetDir, rep.Verified)
		}
	}
	// The peers read a plain array's boxes too.
	t.Run("tensorstore peer", func(t *testing.T) {
		sc, err := ArrayScenario(array, 0)
		if err != nil {
			t.Fatal(err)
		}
		sc.Run.Engine = "host"
		boxes := filepath.Join(t.TempDir(), "boxes.json")
		runScenario(t, sc, Options{BoxesOut: boxes})
		py := zarrtest.MustHavePython(t, "numpy", "zarr", "tensorstore")
		out, err := exec.Command(py, filepath.Join("..", "..", "peers", "tensorstore_peer.py"), "--device", "cpu", "--json", boxes).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"peer": "tensorstore"`) {
			t.Fatalf("tensorstore_peer.py: %v\n%s", err, out)
		}
	})
	// What cannot be.
	sc, err := ArrayScenario(array, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ov   RunOverrides
		want string
	}{
		{RunOverrides{Boxes: "32,32", Warmup: -1}, "want chunks, or a box shape of 3 axes"},
		{RunOverrides{Batches: 9, Warmup: -1}, "run.batches: 9: the 2 chunks of the arrays make 1 batches of 4"},
	} {
		if err := sc.Override(c.ov); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Override(%+v): %v, want %q", c.ov, err, c.want)
		}
	}
	if _, err := ArrayScenario(array, 1); err == nil || !strings.Contains(err.Error(), "is an array, not an OME-NGFF image") {
		t.Errorf("ArrayScenario(array, level 1): %v", err)
	}
	if _, err := Run(context.Background(), Env{Stderr: io.Discard, Logger: slog.New(slog.DiscardHandler)}, sc, Options{Duration: 2e9}); err == nil || !strings.Contains(err.Error(), "reads every chunk once") {
		t.Errorf("Run of chunks with --duration: %v", err)
	}
}
