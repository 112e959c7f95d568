package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/pipeline"
)

// scenarioFile writes validScenario with the replacements (old, new
// pairs) applied and loads it.
func scenarioFile(t *testing.T, dir string, oldnew ...string) *Scenario {
	t.Helper()
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(validScenario, oldnew[i]) {
			t.Fatalf("%q is not in validScenario", oldnew[i])
		}
	}
	doc := strings.NewReplacer(oldnew...).Replace(validScenario)
	file := filepath.Join(dir, "t.json")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(file)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestSequence: the samples pushed are the warm-up boxes, then the
// measured ones once per epoch, each later epoch a reordering; an endless
// single-epoch run goes on with the boxes a longer scenario would draw.
func TestSequence(t *testing.T) {
	sc, err := parseScenario("t", []byte(validScenario))
	if err != nil {
		t.Fatal(err)
	}
	sc.Run.Epochs = 3
	bs, err := newBoxSet(sc, t.TempDir(), nil, drawBoxes(sc))
	if err != nil {
		t.Fatal(err)
	}
	var got []pipeline.Sample
	for s := range bs.sequence(sc, false) {
		got = append(got, s)
	}
	warm, per := sc.Run.Warmup*sc.Run.Config.BatchSize, sc.Run.Batches*sc.Run.Config.BatchSize
	if len(got) != warm+3*per {
		t.Fatalf("%d samples; want %d", len(got), warm+3*per)
	}
	key := func(s pipeline.Sample) string { b, _ := json.Marshal(s); return string(b) }
	sorted := func(ss []pipeline.Sample) []string {
		var k []string
		for _, s := range ss {
			k = append(k, key(s))
		}
		slices.Sort(k)
		return k
	}
	for i, s := range bs.Samples[:warm+per] {
		if key(got[i]) != key(bs.sample(s)) {
			t.Fatalf("sample %d is not the scenario's", i)
		}
	}
	first := got[warm : warm+per]
	for e := 1; e < 3; e++ {
		if !cmp.Equal(sorted(got[warm+e*per:warm+(e+1)*per]), sorted(first)) {
			t.Errorf("epoch %d does not hold epoch 1's boxes", e+1)
		}
	}

	// Endless, one epoch: the boxes of a scenario with more batches.
	sc.Run.Epochs = 1
	longer := *sc
	longer.Run.Batches *= 5
	want := drawBoxes(&longer)
	var n int
	for s := range bs.sequence(sc, true) {
		if key(s) != key(bs.sample(want[n])) {
			t.Fatalf("endless sample %d differs from a longer scenario's", n)
		}
		if n++; n == len(want) {
			break
		}
	}
}

// TestRunEpochs runs three epochs with a chunk cache on the host engine:
// the report gives each epoch, the later ones hit the cache. An epoch is
// longer than the batches the pipeline plans ahead (which, planned before
// the chunks they share with earlier batches are cached, miss).
func TestRunEpochs(t *testing.T) {
	dir := t.TempDir()
	sc := scenarioFile(t, dir, `"warmup": 1,`, `"warmup": 0, "epochs": 3,`, `"n_io_threads": 2,`, `"n_io_threads": 2, "chunk_cache_bytes": "16MiB",`, `"batches": 2,`, `"batches": 12,`)
	rep, _ := runScenario(t, sc, Options{Data: filepath.Join(dir, "data")})
	er := rep.Epochs
	switch {
	case er == nil || len(er.Each) != 3:
		t.Fatalf("epochs report %+v; want 3 epochs", er)
	case rep.Batches != 36 || rep.ChunkCache != 16<<20:
		t.Errorf("%d batches, chunk cache %d; want 36, 16 MiB", rep.Batches, rep.ChunkCache)
	case er.FirstGBps <= 0 || er.LaterGBps <= 0:
		t.Errorf("epoch rates %v, %v", er.FirstGBps, er.LaterGBps)
	case er.LaterHitRate < 0.5 || rep.Stats.Counters["chunk_cache_hits"] == 0:
		t.Errorf("later epochs' hit rate %v, %d hits in all; want most later lookups to hit", er.LaterHitRate, rep.Stats.Counters["chunk_cache_hits"])
	}
	var batches int
	for _, e := range er.Each {
		batches += e.Batches
	}
	if batches != rep.Batches {
		t.Errorf("epochs hold %d batches, the run %d", batches, rep.Batches)
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, w := range []string{"chunk cache", "epochs       epoch 1", "hit rate"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
}

// TestRunDuration streams for a few seconds instead of the scenario's
// batch count and samples memory and throughput.
func TestRunDuration(t *testing.T) {
	dir := t.TempDir()
	sc := scenarioFile(t, dir)
	d := 2500 * time.Millisecond
	rep, _ := runScenario(t, sc, Options{Data: filepath.Join(dir, "data"), Duration: d})
	s := rep.Soak
	switch {
	case s == nil:
		t.Fatal("no soak report")
	case rep.Wall < d || rep.Duration != d:
		t.Errorf("wall %v, duration %v; want %v", rep.Wall, rep.Duration, d)
	case rep.Batches < 1 || rep.Stats.Counters["batches_emitted"] != int64(rep.Batches):
		t.Errorf("%d batches reported, %d emitted", rep.Batches, rep.Stats.Counters["batches_emitted"])
	case len(s.Samples) < 3 || s.Samples[0].T > 100*time.Millisecond:
		t.Errorf("%d samples, the first at %v; want one at the start and one a second", len(s.Samples), s.Samples[0].T)
	case s.OutputGBps == nil || s.OutputGBps.Max <= 0:
		t.Errorf("output series %+v", s.OutputGBps)
	case s.GPUCommitted != nil || s.GPUUsed != nil || len(s.Limits) != 0:
		t.Errorf("host engine: GPU series %+v, %+v, limits %+v", s.GPUCommitted, s.GPUUsed, s.Limits)
	}
	if runtime.GOOS == "linux" && (s.RSS == nil || s.RSS.Min <= 0 || s.RSS.Max < s.RSS.Min) {
		t.Errorf("rss series %+v", s.RSS)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"samples":[{"t_ns":`) {
		t.Errorf("JSON report lacks the samples: %s", b)
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, w := range []string{"(--duration)", "soak ", "rss", "output"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, text.String())
		}
	}
}

// TestSoakSeries: growth is flagged when the last window's average passes
// the first's by more than 5% and 16 MiB.
func TestSoakSeries(t *testing.T) {
	mk := func(rss func(i int) int64) *SoakReport {
		s := &sampler{}
		for i := range 181 {
			s.samples = append(s.samples, SoakSample{T: time.Duration(i) * time.Second, RSS: rss(i), OutputGBps: 1})
		}
		return s.summarize()
	}
	flat := mk(func(i int) int64 { return 1<<30 + int64(i%3)<<20 })
	if flat.Window != time.Minute || flat.RSS == nil || flat.RSS.Growing {
		t.Errorf("flat rss: window %v, series %+v", flat.Window, flat.RSS)
	}
	grow := mk(func(i int) int64 { return 1<<30 + int64(i)<<20 })
	if !grow.RSS.Growing || grow.RSS.Min != 1<<30 || grow.RSS.Last != 1<<30+180<<20 {
		t.Errorf("growing rss: %+v", grow.RSS)
	}

	// The sample taken when the run stops, 3 ms after the last tick, has
	// a rate that says nothing; the output series leaves it out.
	s := &sampler{}
	for i := range 10 {
		s.samples = append(s.samples, SoakSample{T: time.Duration(i) * time.Second, OutputGBps: 40 + float64(i%2)})
	}
	s.samples = append(s.samples, SoakSample{T: 9*time.Second + 3*time.Millisecond, OutputGBps: 2000})
	if o := s.summarize().OutputGBps; o == nil || o.Max != 41 || o.Min != 40 || o.Last != 41 {
		t.Errorf("output series %+v: want 40-41 GB/s, the stop sample left out", o)
	}
}

// TestRunCUDACache runs the smoke scenario on the CUDA engine for three
// epochs with a chunk cache, then for a few seconds (--duration): the
// later epochs hit the cache, and the soak samples the GPU's memory and
// checks the largest against run.config.max_gpu_memory_bytes.
func TestRunCUDACache(t *testing.T) {
	cudatest.MustHaveGPU(t)
	data := filepath.Join(t.TempDir(), "data")
	sc, err := LoadScenario("smoke")
	if err != nil {
		t.Fatal(err)
	}
	// The smoke dataset decodes to 8 MiB; room for the cache under the cap.
	sc.Run.Engine, sc.Run.Config.MaxGPUMemoryBytes = "cuda", 2<<30
	sc.Run.Warmup, sc.Run.Batches, sc.Run.Epochs, sc.Run.Config.ChunkCacheBytes = 0, 24, 3, 16<<20
	rep, _ := runScenario(t, sc, Options{Verify: true, Data: data})
	if er := rep.Epochs; rep.Engine != "cuda" || !rep.Verified || er == nil || len(er.Each) != 3 || er.LaterHitRate < 0.5 {
		t.Errorf("engine %s, verified %v, epochs %+v; want a verified cuda run of 3 epochs, the later ones mostly hits", rep.Engine, rep.Verified, er)
	}

	sc.Run.Epochs = 1
	rep, _ = runScenario(t, sc, Options{Data: data, Duration: 3 * time.Second})
	s := rep.Soak
	if s == nil || s.GPUCommitted == nil || s.GPUUsed == nil {
		t.Fatalf("soak report %+v: want GPU memory series", s)
	}
	if s.GPUCommitted.Min != s.GPUCommitted.Max || s.GPUCommitted.Max < float64(sc.Run.Config.ChunkCacheBytes) || s.GPUUsed.Min < s.GPUCommitted.Max {
		t.Errorf("gpu committed %+v (a chunk cache of %d), device used %+v: want committed flat, holding the cache, within used", s.GPUCommitted, sc.Run.Config.ChunkCacheBytes, s.GPUUsed)
	}
	limits := map[string]SoakLimit{}
	for _, l := range s.Limits {
		limits[l.Name] = l
	}
	if l, ok := limits["gpu committed"]; !ok || !l.Within || l.Limit != int64(sc.Run.Config.MaxGPUMemoryBytes) {
		t.Errorf("gpu committed limit %+v; want within run.config.max_gpu_memory_bytes", l)
	}
	if _, ok := limits["rss"]; !ok && runtime.GOOS == "linux" {
		t.Errorf("no rss limit in %+v", s.Limits)
	}
	var text strings.Builder
	rep.WriteText(&text)
	t.Logf("soak:\n%s", text.String()[strings.Index(text.String(), "soak "):])
}
