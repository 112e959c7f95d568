package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// runScenario runs sc with o and returns the report and what the run wrote
// to stderr.
func runScenario(t *testing.T, sc *Scenario, o Options) (*Report, string) {
	t.Helper()
	var stderr bytes.Buffer
	rep, err := Run(context.Background(), Env{Stderr: &stderr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sc, o)
	if err != nil {
		t.Fatalf("Run %s: %v\nstderr:\n%s", sc.Name, err, stderr.String())
	}
	return rep, stderr.String()
}

// strictJSON decodes b into v, refusing unknown fields.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func TestRunSmoke(t *testing.T) {
	dir := t.TempDir()
	data, trace, boxes := filepath.Join(dir, "data"), filepath.Join(dir, "trace.json"), filepath.Join(dir, "boxes.json")
	sc, err := LoadScenario("smoke")
	if err != nil {
		t.Fatal(err)
	}
	sc.Run.Engine = "host"
	rep, errs := runScenario(t, sc, Options{Verify: true, Data: data, Trace: trace, BoxesOut: boxes, Ceilings: true})
	if !strings.Contains(errs, "wrote 1 image to "+data) {
		t.Errorf("bench did not report generating the dataset: %q", errs)
	}
	c := rep.Stats.Counters
	samples := int64(sc.Run.Batches * sc.Run.Config.BatchSize)
	perSample := int64(4)
	for _, n := range sc.Run.Config.SampleShape {
		perSample *= int64(n)
	}
	switch {
	case rep.Engine != "host" || rep.Device != "cpu":
		t.Errorf("engine %s on %s; want host on cpu", rep.Engine, rep.Device)
	case !rep.Verified || !rep.Generated:
		t.Errorf("verified %v, generated %v; want both", rep.Verified, rep.Generated)
	case rep.Batches != sc.Run.Batches || c["batches_emitted"] != int64(sc.Run.Batches):
		t.Errorf("%d batches reported, %d emitted after the reset; want %d", rep.Batches, c["batches_emitted"], sc.Run.Batches)
	case c["samples_emitted"] != samples || c["output_bytes"] != samples*perSample:
		t.Errorf("%d samples, %d output bytes; want %d, %d", c["samples_emitted"], c["output_bytes"], samples, samples*perSample)
	case rep.OutputGBps <= 0 || rep.SamplesPerS <= 0 || rep.Wall <= 0:
		t.Errorf("throughput %v GB/s, %v samples/s, wall %v", rep.OutputGBps, rep.SamplesPerS, rep.Wall)
	case rep.SourceGBps*2 != rep.OutputGBps && (rep.OutputGBps/rep.SourceGBps < 1.999 || rep.OutputGBps/rep.SourceGBps > 2.001):
		t.Errorf("f32 output from uint16: output %v GB/s is not twice the source's %v", rep.OutputGBps, rep.SourceGBps)
	case rep.CeilingError != "":
		t.Errorf("ceilings: %s", rep.CeilingError)
	}
	names := map[string]Ceiling{}
	for _, cl := range rep.Ceilings {
		names[cl.Name] = cl
		if cl.GBps <= 0 || cl.Bytes <= 0 || cl.Time <= 0 {
			t.Errorf("ceiling %+v", cl)
		}
	}
	for _, n := range []string{"pread replay", "decode-only (cpu)", "assemble-only (cpu)"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no %s ceiling in %+v", n, rep.Ceilings)
		}
	}
	if rep.Lowest == "" || rep.OfLowest <= 0 {
		t.Errorf("lowest ceiling %q, fraction %v", rep.Lowest, rep.OfLowest)
	}

	// The trace holds the phases and one pop span per batch.
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	pops, phases, stages := 0, map[string]bool{}, map[string]bool{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.TID == traceRowPop {
			pops++
		}
		if e.Ph == "X" && e.TID == traceRowPhases {
			phases[e.Name] = true
		}
		if e.Ph == "X" && e.TID >= firstLaneRow {
			stages[e.Cat] = true
		}
	}
	// And the pipeline's own stage spans, on rows per worker.
	for _, st := range []string{"plan", "read", "decode", "assemble"} {
		if !stages[st] {
			t.Errorf("trace has no pipeline %q spans (has %v)", st, stages)
		}
	}
	if pops != sc.Run.Warmup+sc.Run.Batches {
		t.Errorf("trace has %d pop spans; want %d", pops, sc.Run.Warmup+sc.Run.Batches)
	}
	for _, p := range []string{"generate dataset", "warmup", "measured batches", "pread replay", "decode-only (cpu)"} {
		if !phases[p] {
			t.Errorf("trace has no %q phase (has %v)", p, phases)
		}
	}

	// The boxes file lists every sample, as drawn from the seed.
	b, err = os.ReadFile(boxes)
	if err != nil {
		t.Fatal(err)
	}
	var bs boxSet
	if err := strictJSON(b, &bs); err != nil {
		t.Fatal(err)
	}
	if len(bs.Samples) != (sc.Run.Warmup+sc.Run.Batches)*sc.Run.Config.BatchSize || bs.Dtype != "float32" || !filepath.IsAbs(bs.DatasetDir) {
		t.Errorf("boxes file: %d samples, dtype %q, dir %q", len(bs.Samples), bs.Dtype, bs.DatasetDir)
	}

	// The tensorstore peer reads the same boxes.
	t.Run("tensorstore peer", func(t *testing.T) {
		py := zarrtest.MustHavePython(t, "numpy", "zarr", "tensorstore")
		out, err := exec.Command(py, filepath.Join("..", "..", "peers", "tensorstore_peer.py"), "--device", "cpu", "--json", boxes).CombinedOutput()
		if err != nil {
			t.Fatalf("tensorstore_peer.py: %v\n%s", err, out)
		}
		var r struct {
			Peer       string  `json:"peer"`
			OutputGBps float64 `json:"output_gbps"`
			Batches    int     `json:"batches"`
			Threads    int     `json:"threads"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if r.Peer != "tensorstore" || r.OutputGBps <= 0 || r.Batches != sc.Run.Batches || r.Threads < 1 {
			t.Errorf("peer report %+v", r)
		}
	})

	// A second run reuses the dataset, and writes a text report.
	rep, errs = runScenario(t, sc, Options{Data: data})
	if strings.Contains(errs, "wrote") {
		t.Errorf("the second run generated the dataset again: %q", errs)
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, w := range []string{"throughput", "GB/s of float32 output", "read amplification", "decompress"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
}

// TestRunHold checks the consumer hold and bf16 output on a tiny
// scenario: the measured wall is at least batches x hold.
func TestRunHold(t *testing.T) {
	dir := t.TempDir()
	doc := strings.NewReplacer(`"hold_ms": 0`, `"hold_ms": 40`, `"dtype": "f32"`, `"dtype": "bf16"`).Replace(validScenario)
	file := filepath.Join(dir, "hold.json")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(file)
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := runScenario(t, sc, Options{Verify: true, Data: filepath.Join(dir, "data")})
	if rep.Wall < 2*40*time.Millisecond || rep.HoldMS != 40 || rep.Dtype != "bfloat16" || !rep.Verified {
		t.Errorf("wall %v, hold %d ms, dtype %s, verified %v; want at least 80ms, 40, bfloat16, true", rep.Wall, rep.HoldMS, rep.Dtype, rep.Verified)
	}
	if got := rep.Stats.Counters["output_bytes"]; got != 2*2*8*32*32*2 {
		t.Errorf("output bytes %d; want %d", got, 2*2*8*32*32*2)
	}
}

func TestDropCache(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		if err := dropFileCache("x"); err == nil {
			t.Errorf("dropFileCache on %s/%s: no error", runtime.GOOS, runtime.GOARCH)
		}
		return
	}
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := dropFileCache(f); err != nil {
		t.Errorf("dropFileCache: %v", err)
	}
	if err := dropFileCache(f + "-missing"); err == nil {
		t.Errorf("dropFileCache of a missing file: no error")
	}
}

// TestRunCUDA runs the smoke scenario on the CUDA engine, checks the first
// batch against the reference reader and measures the GPU ceilings.
func TestRunCUDA(t *testing.T) {
	cudatest.MustHaveGPU(t)
	_, err := nvcomp.Load()
	cudatest.RequireNVCOMP(t, err)
	sc, err := LoadScenario("smoke")
	if err != nil {
		t.Fatal(err)
	}
	sc.Run.Engine = "cuda"
	rep, _ := runScenario(t, sc, Options{Verify: true, Data: filepath.Join(t.TempDir(), "data"), Ceilings: true})
	if rep.Engine != "cuda" || !strings.HasPrefix(rep.Device, "cuda:") || !rep.Verified || rep.OutputGBps <= 0 {
		t.Errorf("engine %s on %s, verified %v, %v GB/s; want a verified cuda run", rep.Engine, rep.Device, rep.Verified, rep.OutputGBps)
	}
	names := map[string]bool{}
	for _, c := range rep.Ceilings {
		names[c.Name] = c.GBps > 0
	}
	want := []string{"pread replay", "h2d (pinned)", "assemble-only (gpu)"}
	if rep.Stats.Counters["chunks_gpu"] > 0 {
		want = append(want, "decode-only (nvcomp)")
	}
	for _, n := range want {
		if !names[n] {
			t.Errorf("no %s ceiling: %+v (error %q)", n, rep.Ceilings, rep.CeilingError)
		}
	}
}
