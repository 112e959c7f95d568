package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cmd/damacy/internal/bench"
	"github.com/damacy-go/damacy/cuda/cudatest"
)

// TestBench runs damacy bench on the smoke scenario: its --json report
// decodes strictly into bench.Report, its stderr says the dataset was
// generated, and a second run reuses the dataset and prints a text
// report. Package bench tests the runs themselves.
func TestBench(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	out, errs := mustRun(t, "bench", "--engine", "host", "--json", "--verify", "--ceilings=false", "--data", data, "smoke")
	var rep bench.Report
	if err := jsonUnmarshalStrict([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if !strings.Contains(errs, "wrote 1 image to "+data) {
		t.Errorf("bench did not report generating the dataset: %q", errs)
	}
	if rep.Engine != "host" || rep.Device != "cpu" || !rep.Verified || !rep.Generated || rep.OutputGBps <= 0 {
		t.Errorf("engine %s on %s, verified %v, generated %v, %v GB/s; want a verified host run that generated its data",
			rep.Engine, rep.Device, rep.Verified, rep.Generated, rep.OutputGBps)
	}
	out, errs = mustRun(t, "bench", "--engine", "host", "--ceilings=false", "--data", data, "smoke")
	if strings.Contains(errs, "wrote") {
		t.Errorf("the second run generated the dataset again: %q", errs)
	}
	for _, w := range []string{"throughput", "GB/s of float32 output", "read amplification", "decompress"} {
		if !strings.Contains(out, w) {
			t.Errorf("text report lacks %q:\n%s", w, out)
		}
	}
}

// TestBenchBadScenario: a scenario file that cannot be used fails the
// command (exit 1) with one line naming the file and the field, and
// generates nothing. Package bench tests the messages of every field.
func TestBenchBadScenario(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.json")
	doc := `{"name": "t", "dataset": {"arrays": 0, "shape": [16, 64], "chunk": [8, 32], "dtype": "uint16", "codec": "zstd", "entropy": 0.5, "seed": 1},
  "run": {"config": {"batch_size": 2, "sample_shape": [8, 32], "dtype": "f32"}, "batches": 2, "warmup": 1, "seed": 1}}`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "bench", "--data", filepath.Join(dir, "data"), file)
	want := "damacy bench: error: " + file + ": dataset.arrays: 0: must be in 1..100000"
	if code != exitError || out != "" || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("bench of a bad scenario = exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", code, out, errs, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Errorf("a bad scenario generated data")
	}
	code, _, errs = runCmd(t, "bench", "nosuch-scenario")
	if code != exitError || !strings.Contains(errs, "not a built-in scenario") || !strings.Contains(errs, "throughput") {
		t.Errorf("bench nosuch-scenario = exit %d, stderr %q; want exit 1 naming the built-in scenarios", code, errs)
	}
}

func TestDemo(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out, _ := mustRun(t, "demo", "--engine", "host")
	for _, w := range []string{"engine:      host", "throughput:", "GB/s of float32 output", "checked:"} {
		if !strings.Contains(out, w) {
			t.Errorf("demo output lacks %q:\n%s", w, out)
		}
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("demo left %d entries in the temp dir", len(left))
	}
}

// TestReadCUDA reads boxes through the CUDA engine and requires the same
// bytes as the host engine.
func TestReadCUDA(t *testing.T) {
	cudatest.MustHaveGPU(t)
	dir := t.TempDir()
	makeStores(t, dir)
	for _, c := range readCases(dir) {
		if c.Dtype == "native" {
			continue
		}
		mustRun(t, c.args()...)
		want, err := os.ReadFile(c.NPY)
		if err != nil {
			t.Fatal(err)
		}
		c.NPY += ".cuda.npy"
		args := c.args()
		args[len(args)-1] = "cuda"
		mustRun(t, args...)
		got, err := os.ReadFile(c.NPY)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the CUDA engine's .npy differs from the host engine's", c.Name)
		}
	}
}
