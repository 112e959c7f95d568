package bench

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

// segFile writes segScenario with the replacements (old, new pairs)
// applied and loads it.
func segFile(t *testing.T, dir string, oldnew ...string) *Scenario {
	t.Helper()
	doc := segScenario
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(doc, oldnew[i]) {
			t.Fatalf("%q is not in segScenario", oldnew[i])
		}
		doc = strings.Replace(doc, oldnew[i], oldnew[i+1], 1)
	}
	file := filepath.Join(dir, "seg.json")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(file)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// noAugment and floatLabel edit segScenario: no transforms, a float
// label.
var (
	noAugment = []string{`,
                     "augment": {"seed": 1, "flip": [{"axis": 1, "p": 0.5}, {"axis": 2, "p": 0.5}, {"axis": 3, "p": 0.5}],
                                 "rot90": [{"axes": [2, 3], "p": 0.5}], "mean": 16384, "std": 21000}}`, `}`}
	floatLabel = []string{`"label": "cells", "dtype": "u8"`, `"label": "cells", "dtype": "f32"`}
)

// TestRunSources runs an image and its label (a float label, no
// augmentation) through one pipeline on the host engine: both tensors are
// verified, the output counts both, the foreground sampler drew the
// boxes, the ceilings cover both sources, and the comparison with one
// pipeline per source runs (and is verified too).
func TestRunSources(t *testing.T) {
	dir := t.TempDir()
	sc := segFile(t, dir, append(slices.Clone(noAugment), floatLabel...)...)
	boxes := filepath.Join(dir, "boxes.json")
	rep, _ := runScenario(t, sc, Options{Verify: true, Ceilings: true, Data: filepath.Join(dir, "data"), BoxesOut: boxes})
	samples := int64(sc.Run.Batches * sc.Run.Config.BatchSize)
	wantSrc := []SourceReport{
		{Name: "image", Path: "", Dtype: "bfloat16", Shape: []int64{1, 8, 32, 32}, OutputBytes: samples * 8 * 32 * 32 * 2},
		{Name: "label", Path: "labels/cells", Dtype: "float32", Shape: []int64{8, 32, 32}, OutputBytes: samples * 8 * 32 * 32 * 4},
	}
	for k := range rep.Sources {
		rep.Sources[k].OutputGBps = 0
	}
	if !slices.EqualFunc(rep.Sources, wantSrc, func(a, b SourceReport) bool {
		return a.Name == b.Name && a.Path == b.Path && a.Dtype == b.Dtype && slices.Equal(a.Shape, b.Shape) && a.OutputBytes == b.OutputBytes
	}) {
		t.Errorf("sources %+v; want %+v", rep.Sources, wantSrc)
	}
	c := rep.Stats.Counters
	if c["output_bytes"] != wantSrc[0].OutputBytes+wantSrc[1].OutputBytes {
		t.Errorf("output bytes %d; want both tensors' %d", c["output_bytes"], wantSrc[0].OutputBytes+wantSrc[1].OutputBytes)
	}
	// The source bytes: uint16 image boxes and uint8 label boxes.
	if got, want := rep.SourceGBps/rep.OutputGBps, float64(2+1)/float64(2+4); math.Abs(got-want) > 1e-9 {
		t.Errorf("source / output GB/s = %v; want %v", got, want)
	}
	if !rep.Verified || rep.Sampler != "foreground" || rep.ForegroundShare < 0.4 || rep.ForegroundShare > 0.95 {
		t.Errorf("verified %v, sampler %q with %.2f of the boxes on foreground; want verified, foreground about 0.67", rep.Verified, rep.Sampler, rep.ForegroundShare)
	}
	if rep.CeilingError != "" {
		t.Errorf("ceilings: %s", rep.CeilingError)
	}
	var asm *Ceiling
	for i := range rep.Ceilings {
		if rep.Ceilings[i].Name == "assemble-only (cpu)" {
			asm = &rep.Ceilings[i]
		}
	}
	if asm == nil || !strings.HasPrefix(asm.Detail, "per source: ") || strings.Count(asm.Detail, "samples") != 2 || asm.OutputGBps <= 0 {
		t.Errorf("assemble-only (cpu) %+v; want one over both sources", asm)
	}
	cr := rep.Compare
	if cr == nil || cr.NoAugment != nil || cr.Apart == nil {
		t.Fatalf("comparisons %+v; want the apart one only", cr)
	}
	if a := cr.Apart; a.Pipelines != 2 || a.Batches != sc.Run.Batches || a.OutputGBps <= 0 || !a.Verified || a.Ratio <= 0 {
		t.Errorf("apart %+v", a)
	}

	// The boxes file names the sources for the peers.
	b, err := os.ReadFile(boxes)
	if err != nil {
		t.Fatal(err)
	}
	var bs boxSet
	if err := strictJSON(b, &bs); err != nil {
		t.Fatal(err)
	}
	if len(bs.Sources) != 2 || bs.Sources[1].Path != "labels/cells" || !slices.Equal(bs.Sources[1].Axes, []int{1, 2, 3}) || bs.Sources[1].DataType != "uint8" || bs.Sampler != "foreground" {
		t.Errorf("boxes file sources %+v, sampler %q", bs.Sources, bs.Sampler)
	}

	var text strings.Builder
	rep.WriteText(&text)
	for _, w := range []string{"GB/s of output (all tensors)", "label      ", "labels/cells", "sampler      foreground", "one pipeline per source"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
	out, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(out), `"apart":{"pipelines":2`) {
		t.Errorf("JSON report %s (%v) lacks the apart comparison", out, err)
	}
}

// TestRunSegmentation runs the tiny segmentation scenario with a u8
// label, with the transforms (flips, quarter turns, normalisation), and
// with both, as the built-in one runs.
func TestRunSegmentation(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edits []string
	}{
		{"u8 label", noAugment},
		{"augment", floatLabel},
		{"both", nil},
	} {
		t.Run(tt.name, func(t *testing.T) { runSegmentation(t, "host", tt.edits) })
	}
}

// TestRunSegmentationCUDA is TestRunSegmentation on the CUDA engine, with
// the GPU ceilings.
func TestRunSegmentationCUDA(t *testing.T) {
	cudatest.MustHaveGPU(t)
	_, err := nvcomp.Load()
	cudatest.RequireNVCOMP(t, err)
	measured := false
	for _, tt := range []struct {
		name  string
		edits []string
	}{
		{"float label", append(slices.Clone(noAugment), floatLabel...)},
		{"u8 label", noAugment},
		{"augment", floatLabel},
		{"both", nil},
	} {
		t.Run(tt.name, func(t *testing.T) { measured = runSegmentation(t, "cuda", tt.edits) || measured })
	}
	if !measured {
		t.Error("no run measured decode-only (nvcomp): no measured batch had a chunk nvCOMP decoded")
	}
}

// runSegmentation runs segScenario with edits on engine, verified, with
// its comparisons and ceilings, and checks the report. It reports whether
// decode-only (nvcomp) was measured.
func runSegmentation(t *testing.T, engine string, edits []string) (nv bool) {
	dir := t.TempDir()
	sc := segFile(t, dir, append(slices.Clone(edits), `"engine": "host"`, `"engine": "`+engine+`"`)...)
	rep, err := Run(context.Background(), Env{Stderr: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sc,
		Options{Verify: true, Ceilings: true, Data: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verified || len(rep.Sources) != 2 || rep.Engine != strings.TrimSuffix(engine, ":0") {
		t.Errorf("verified %v, sources %+v, engine %s", rep.Verified, rep.Sources, rep.Engine)
	}
	cr := rep.Compare
	if cr == nil || cr.Apart == nil || !cr.Apart.Verified || cr.Apart.OutputGBps <= 0 || (sc.Run.Config.Augment != nil) != (cr.NoAugment != nil) {
		t.Fatalf("comparisons %+v; want apart, and without augment when the run has run.config.augment, verified", cr)
	}
	if na := cr.NoAugment; na != nil && (!na.Verified || na.OutputGBps <= 0 || math.Abs(na.AugmentCostPct-100*(1-na.Ratio)) > 1e-9) {
		t.Errorf("without augment %+v", na)
	}
	if rep.CeilingError != "" {
		t.Errorf("ceilings: %s", rep.CeilingError)
	}
	// Each source decodes on a stream of its own: decode-only (nvcomp),
	// measured when the measured batches had chunks decoded on the GPU
	// (a batch planned before the statistics reset may have had them
	// all), times the image's and the label's calls at once.
	i := slices.IndexFunc(rep.Ceilings, func(c Ceiling) bool { return c.Name == "decode-only (nvcomp)" })
	nv = i >= 0
	if nv && !strings.Contains(rep.Ceilings[i].Detail, "in 2 call(s) at once") || !nv && rep.Stats.Counters["chunks_gpu"] > 0 {
		t.Errorf("ceilings %+v, %d chunks decoded on the GPU: want decode-only (nvcomp) of both sources' calls at once", rep.Ceilings, rep.Stats.Counters["chunks_gpu"])
	}
	var text strings.Builder
	rep.WriteText(&text)
	want := []string{"one pipeline per source"}
	if sc.Run.Config.Augment != nil {
		want = append(want, "augment      flip z p=0.5", "rot90 y-x p=0.5", "(v - 16384) / 21000", "augmentation costs")
	}
	for _, w := range want {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
	return nv
}

// TestCompareNothing: --compare on a scenario with neither augmentation
// nor several sources is an error naming both.
func TestCompareNothing(t *testing.T) {
	sc, err := parseScenario("t", []byte(validScenario))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Env{Stderr: io.Discard}, sc, Options{Compare: true, Data: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "neither run.config.augment nor several run.config.sources") {
		t.Errorf("Run --compare on %s = %v; want nothing to compare", sc.Name, err)
	}
}

// TestForegroundBoxes: the foreground sampler centres about the asked
// share of boxes on label voxels that are not 0, draws the same boxes
// from the same seed, and goes on past the run's boxes for --duration.
func TestForegroundBoxes(t *testing.T) {
	dir := t.TempDir()
	sc := segFile(t, dir, `"batches": 3,`, `"batches": 100,`)
	data := filepath.Join(dir, "data")
	if err := EnsureDataset(context.Background(), Env{Stderr: io.Discard}, &sc.Dataset, data); err != nil {
		t.Fatal(err)
	}
	draw := func() *boxSet {
		bs, err := newBoxSet(sc, data, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := bs.draw(context.Background(), sc); err != nil {
			t.Fatal(err)
		}
		return bs
	}
	bs := draw()
	if again := draw(); !slices.EqualFunc(bs.Samples, again.Samples, func(a, b boxSample) bool { return a.Array == b.Array && slices.Equal(a.Box, b.Box) }) {
		t.Errorf("the same seed drew different boxes")
	}
	share := float64(bs.foreground) / float64(len(bs.Samples))
	if share < 0.55 || share > 0.8 {
		t.Errorf("%d of %d boxes centred on foreground (%.2f); want about 0.67", bs.foreground, len(bs.Samples), share)
	}
	labels := map[int][]byte{}
	next := bs.stream()
	centred := 0
	for range bs.Samples {
		s, fg := next()
		for d, r := range s.Box {
			if r[0] < 0 || r[1] > sc.Dataset.Shape[d] || r[1]-r[0] != int64(sc.Run.Config.SampleShape[d]) {
				t.Fatalf("box %v is not an in-bounds box of the sample shape", s.Box)
			}
		}
		if !fg {
			continue
		}
		if labels[s.Array] == nil {
			a, err := bs.levelAt(s.Array, "labels/cells")
			if err != nil {
				t.Fatal(err)
			}
			labels[s.Array] = readAll(t, a)
		}
		// Every foreground box holds foreground; one that no edge of the
		// image moved has it at its centre.
		sh := sc.Dataset.labelShape()
		lab := labels[s.Array]
		at := func(z, y, x int64) byte { return lab[(z*sh[1]+y)*sh[2]+x] }
		found := false
		for z := s.Box[1][0]; z < s.Box[1][1] && !found; z++ {
			for y := s.Box[2][0]; y < s.Box[2][1] && !found; y++ {
				for x := s.Box[3][0]; x < s.Box[3][1] && !found; x++ {
					found = at(z, y, x) != 0
				}
			}
		}
		if !found {
			t.Errorf("foreground box %v holds no foreground", s.Box)
		}
		moved := false
		for d := 1; d < 4; d++ {
			moved = moved || s.Box[d][0] == 0 || s.Box[d][1] == sc.Dataset.Shape[d]
		}
		if !moved {
			centred++
			if at(s.Box[1][0]+4, s.Box[2][0]+16, s.Box[3][0]+16) == 0 {
				t.Errorf("foreground box %v: its centre voxel is background", s.Box)
			}
		}
	}
	if centred == 0 {
		t.Errorf("no foreground box away from the edges")
	}
	// Past the run's boxes, a --duration run draws on.
	n := 0
	for s := range bs.sequence(sc, true) {
		if n++; n > len(bs.Samples)+10 {
			break
		}
		if n > len(bs.Samples) && !strings.Contains(s.URI, "a00") {
			t.Fatalf("endless sample %d: %v", n, s)
		}
	}
}

// TestTransformed: the reference applies pipeline.Transform's formula:
// a quarter turn (np.rot90) is Perm [1, 0] with axis 0 flipped, and a
// permutation moves each axis's elements.
func TestTransformed(t *testing.T) {
	x := []byte{0, 1, 2, 3, 4, 5} // [[0 1 2] [3 4 5]]
	rot := &pipeline.Transform{Perm: []int{1, 0}, Flip: []bool{true, false}}
	if got, want := transformed(x, 1, []int64{2, 3}, rot), []byte{2, 5, 1, 4, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("rot90 of [[0 1 2] [3 4 5]] = %v; want np.rot90's %v", got, want)
	}
	flipX := &pipeline.Transform{Perm: []int{0, 1}, Flip: []bool{false, true}}
	if got, want := transformed(x, 1, []int64{2, 3}, flipX), []byte{2, 1, 0, 5, 4, 3}; !slices.Equal(got, want) {
		t.Errorf("flip of the last axis = %v; want %v", got, want)
	}
	// A 2x3x4 array of 2-byte elements, axes permuted (2, 0, 1).
	x3 := make([]byte, 2*24)
	for i := range 24 {
		x3[2*i] = byte(i)
	}
	perm := &pipeline.Transform{Perm: []int{2, 0, 1}, Flip: []bool{false, false, false}}
	y := transformed(x3, 2, []int64{2, 3, 4}, perm)
	for a := range 4 {
		for b := range 2 {
			for c := range 3 {
				if got, want := y[2*((a*2+b)*3+c)], byte((b*3+c)*4+a); got != want {
					t.Fatalf("y[%d,%d,%d] = %d; want x[%d,%d,%d] = %d", a, b, c, got, b, c, a, want)
				}
			}
		}
	}
	// The intensity map: scale, offset, clip, NaN.
	xf := &pipeline.Transform{Intensity: true, Scale: 2, Offset: 1, Low: -10, High: 10}
	for _, tt := range []struct{ in, want float32 }{{1, 3}, {100, 10}, {-100, -10}} {
		if got := math.Float32frombits(intensity(math.Float32bits(tt.in), xf)); got != tt.want {
			t.Errorf("intensity(%v) = %v; want %v", tt.in, got, tt.want)
		}
	}
	if got := intensity(0x7fc00001, xf); got != 0x7fc00000 {
		t.Errorf("intensity(NaN) = %#x; want the quiet NaN 0x7fc00000", got)
	}
	// Integer outputs pass values through.
	reg := &zarr.Region{DataType: zarr.Uint8, Shape: []int64{3}, Data: []byte{0, 3, 255}}
	got, err := reference(reg, pipeline.I32, nil)
	if err != nil || len(got) != 12 || bits(got[4:], 4) != 3 || bits(got[8:], 4) != 255 {
		t.Errorf("reference of uint8 [0 3 255] as int32 = %v, %v", got, err)
	}
}
