package bench

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

// handLoad is what the measured batches of a run ask of the stages,
// computed by hand from the boxes the run wrote (--boxes-out): each
// source's output bytes, and the chunks behind them, each counted once
// per batch however many of its boxes touch it (a chunk absent from the
// store is fill: neither read nor decoded). perBox counts the decoded
// bytes as every box alone would, duplicates and all.
type handLoad struct {
	output                  []int64
	stored, decoded, perBox int64
}

func (h handLoad) outputBytes() int64 {
	var n int64
	for _, o := range h.output {
		n += o
	}
	return n
}

// loadByHand reads the boxes file at path and walks the chunk grid of
// every measured box of every source. The dataset must be unsharded, so
// that a chunk's stored bytes are its file's size.
func loadByHand(t *testing.T, path string) handLoad {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bs boxSet
	if err := json.Unmarshal(b, &bs); err != nil {
		t.Fatal(err)
	}
	h := handLoad{output: make([]int64, len(bs.Sources))}
	measured := bs.Samples[bs.Warmup*bs.BatchSize:]
	for k, src := range bs.Sources {
		dt, err := pipeline.ParseDtype(src.Dtype)
		if err != nil {
			t.Fatal(err)
		}
		sample := int64(dt.Size())
		for _, a := range src.Axes {
			sample *= bs.SampleShape[a]
		}
		h.output[k] = int64(len(measured)) * sample
		arrays := map[int]*zarr.Array{}
		for start := 0; start < len(measured); start += bs.BatchSize {
			seen := map[string]bool{}
			for _, s := range measured[start:min(start+bs.BatchSize, len(measured))] {
				a := arrays[s.Array]
				if a == nil {
					if a, err = bs.levelAt(s.Array, src.Path); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(a.ShardShape(), a.ChunkShape()) {
						t.Fatalf("%s is sharded: want one file per chunk", a.Path())
					}
					arrays[s.Array] = a
				}
				chunk := a.ChunkShape()
				decoded := int64(a.DataType().Size())
				for _, c := range chunk {
					decoded *= c
				}
				// Every grid cell the box touches, along the source's axes.
				lo, hi := make([]int64, len(src.Axes)), make([]int64, len(src.Axes))
				for j, ax := range src.Axes {
					lo[j], hi[j] = s.Box[ax][0]/chunk[j], (s.Box[ax][1]-1)/chunk[j]
				}
				for g := slices.Clone(lo); g != nil; g = nextCell(g, lo, hi) {
					file, err := a.Store().(*zarr.DirStore).Path(a.ChunkKey(g))
					if err != nil {
						t.Fatal(err)
					}
					fi, err := os.Stat(file)
					if errors.Is(err, fs.ErrNotExist) {
						continue // fill
					} else if err != nil {
						t.Fatal(err)
					}
					h.perBox += decoded
					if !seen[file] {
						seen[file] = true
						h.stored += fi.Size()
						h.decoded += decoded
					}
				}
			}
		}
	}
	return h
}

// nextCell steps g through the cells of [lo, hi] in C order; nil after
// the last.
func nextCell(g, lo, hi []int64) []int64 {
	for d := len(g) - 1; d >= 0; d-- {
		if g[d] < hi[d] {
			g[d]++
			return g
		}
		g[d] = lo[d]
	}
	return nil
}

func ceilingsByName(t *testing.T, rep *Report) map[string]Ceiling {
	t.Helper()
	if rep.CeilingError != "" {
		t.Fatalf("ceilings: %s", rep.CeilingError)
	}
	m := map[string]Ceiling{}
	for _, c := range rep.Ceilings {
		m[c.Name] = c
	}
	for _, n := range []string{"pread replay", "decode-only (cpu)", "assemble-only (cpu)"} {
		if _, ok := m[n]; !ok {
			t.Fatalf("no %s ceiling in %+v", n, rep.Ceilings)
		}
	}
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// checkScaled checks the ceilings of a host-engine run against h, the
// hand count of its measured batches, and against its counters. The
// replay reads, and decode-only decodes, each chunk of a batch once, as
// h counts them; the run's counters count no chunk more than that (the
// work of the batches planned ahead of the stats reset, done before it,
// they do not count at all). Each ceiling's bytes per output byte is
// the run's counter of its stage's work over its output (the pread
// replay's, the bytes it read by pread, or all it read when it copied
// nearly all of them from mapped files), its output figure its rate over
// that. With several sources, the output is every source's, and
// assemble-only weights each source's rate by its share of the output.
// The timings are not checked.
func checkScaled(t *testing.T, rep *Report, h handLoad) {
	t.Helper()
	out := h.outputBytes()
	c := rep.Stats.Counters
	if c["output_bytes"] != out {
		t.Fatalf("the run's output %d bytes; by hand %d", c["output_bytes"], out)
	}
	var decoded int64
	for _, s := range rep.Stats.Stages {
		if s.Name == "decompress" {
			decoded = s.OutBytes
		}
	}
	if decoded > h.decoded || decoded == 0 {
		t.Errorf("the run decoded %d bytes; by hand its batches' chunks are %d (%d box by box)", decoded, h.decoded, h.perBox)
	}
	cs := ceilingsByName(t, rep)
	pr, dec := cs["pread replay"], cs["decode-only (cpu)"]
	if pr.Bytes != h.stored {
		t.Errorf("the pread replay read %d bytes; by hand the batches' chunks are %d", pr.Bytes, h.stored)
	}
	if dec.Bytes == 0 || dec.Bytes%h.decoded != 0 {
		t.Errorf("decode-only decoded %d bytes; want passes over the batches' chunks, %d bytes each", dec.Bytes, h.decoded)
	}
	read, preads := c["bytes_read"], c["bytes_read"]-c["bytes_mapped"]
	wantRead := float64(preads) / float64(out)
	if preads*100 < read {
		wantRead = float64(read) / float64(out)
		if pr.Limits {
			t.Errorf("pread replay: the run copied %d of %d bytes from mapped files, yet a limit", c["bytes_mapped"], read)
		}
	} else if !pr.Limits {
		t.Errorf("pread replay: the run read %d of %d bytes by pread, yet not a limit", preads, read)
	}
	for _, x := range []struct {
		c    Ceiling
		want float64
	}{{pr, wantRead}, {dec, float64(decoded) / float64(out)}} {
		if !near(x.c.PerOutput, x.want) || x.want > 0 && !near(x.c.OutputGBps, x.c.GBps/x.want) {
			t.Errorf("%s: %v bytes per output byte, %v GB/s as output of %v GB/s; want %v bytes per output byte", x.c.Name, x.c.PerOutput, x.c.OutputGBps, x.c.GBps, x.want)
		}
	}
	asm := cs["assemble-only (cpu)"]
	if asm.PerOutput != 1 {
		t.Errorf("assemble-only (cpu): %v bytes per output byte; want 1", asm.PerOutput)
	}
	if len(h.output) == 1 {
		if len(asm.Parts) != 0 || asm.OutputGBps != asm.GBps {
			t.Errorf("assemble-only (cpu) of one source: %+v", asm)
		}
		return
	}
	if len(asm.Parts) != len(h.output) {
		t.Fatalf("assemble-only (cpu) parts %+v; want one per source", asm.Parts)
	}
	var secs float64
	for k, p := range asm.Parts {
		share := float64(h.output[k]) / float64(out)
		if p.Source != rep.Sources[k].Name || !near(p.Share, share) || p.GBps <= 0 {
			t.Errorf("assemble-only (cpu) part %d: %+v; want source %s, share %v", k, p, rep.Sources[k].Name, share)
		}
		secs += share / p.GBps
	}
	if !near(asm.OutputGBps, 1/secs) || asm.GBps != asm.OutputGBps {
		t.Errorf("assemble-only (cpu): %v GB/s, %v as output; want the sources' rates at the run's mix, %v", asm.GBps, asm.OutputGBps, 1/secs)
	}
}

// unsharded drops the shards of a scenario's dataset (image and label), so
// that every chunk is a file.
var unsharded = []string{`, "shard": [1, 16, 64, 64]`, ``, `, "shard": [16, 64, 64]`, ``}

// TestCeilingScaleSources runs an image and its label through one
// pipeline (the segmentation scenario shrunk, unsharded, host engine) and
// checks the ceilings' accounting against a hand count of the measured
// batches (checkScaled): the work of both sources against the output of
// both, the assemble-only ceiling of the two at the run's mix of them.
func TestCeilingScaleSources(t *testing.T) {
	dir := t.TempDir()
	sc := segFile(t, dir, append(slices.Clone(unsharded), `"batches": 3,`, `"batches": 12,`)...)
	boxes := filepath.Join(dir, "boxes.json")
	rep, _ := runScenario(t, sc, Options{Ceilings: true, Data: filepath.Join(dir, "data"), BoxesOut: boxes})
	h := loadByHand(t, boxes)
	if len(h.output) != 2 || h.output[0] != 2*h.output[1] {
		t.Fatalf("output by hand %v; want a bf16 image and a u8 label of the same shape", h.output)
	}
	checkScaled(t, rep, h)
}

// TestCeilingScaleOverlap runs boxes that overlap heavily (boxes of 3x3
// chunks in a 4x4 grid, 8 to a batch), so that most chunk uses of a batch
// repeat another box's: the replay and decode-only handle each chunk once
// per batch, as the run reads and decodes it, and the run's counters,
// which scale them, count no chunk more often (checkScaled).
func TestCeilingScaleOverlap(t *testing.T) {
	dir := t.TempDir()
	sc := scenarioFile(t, dir, `"chunk": [8, 32, 32], "shard": [16, 64, 64],`, `"chunk": [8, 16, 16],`,
		`"batch_size": 2, "sample_shape": [8, 32, 32],`, `"batch_size": 8, "sample_shape": [8, 48, 48],`, `"batches": 2,`, `"batches": 12,`)
	boxes := filepath.Join(dir, "boxes.json")
	rep, _ := runScenario(t, sc, Options{Ceilings: true, Data: filepath.Join(dir, "data"), BoxesOut: boxes})
	h := loadByHand(t, boxes)
	if h.perBox < 2*h.decoded {
		t.Fatalf("the boxes' chunk uses decode %d bytes, the distinct chunks of each batch %d: want heavy overlap", h.perBox, h.decoded)
	}
	checkScaled(t, rep, h)
}

// TestScale: each ceiling is scaled by the run's own counters of its
// stage's work over the run's output, never by the measurement's own
// bytes.
func TestScale(t *testing.T) {
	srcs := []SourceReport{{Name: "image", OutputBytes: 600}, {Name: "label", OutputBytes: 300}}
	for _, c := range []struct {
		name        string
		st          pipeline.Stats
		read        float64 // want, per output byte
		decoded     float64
		copied      float64
		pread       float64 // the pread replay's bytes per output byte
		preadLimits bool
	}{
		{name: "all preads", st: pipeline.Stats{BytesRead: 800, OutputBytes: 1000, Decompress: pipeline.Metric{OutBytes: 1900}},
			read: 0.8, decoded: 1.9, pread: 0.8, preadLimits: true},
		{name: "some mapped", st: pipeline.Stats{BytesRead: 1000, BytesMapped: 600, OutputBytes: 1000},
			read: 1, pread: 0.4, preadLimits: true},
		// The replay read 1000 bytes; in the measured time the run read
		// 980 (the batches planned ahead of the stats reset read the rest
		// before it), all from mapped files. The old scaling took the
		// replay's bytes less the run's mapped ones, 20, for the run's
		// preads: a limit 49 times the replay's rate as output.
		{name: "mapped", st: pipeline.Stats{BytesRead: 980, BytesMapped: 980, OutputBytes: 1000},
			read: 0.98, pread: 0.98, preadLimits: false},
		{name: "nearly all mapped", st: pipeline.Stats{BytesRead: 1000, BytesMapped: 995, OutputBytes: 1000},
			read: 1, pread: 1, preadLimits: false},
		{name: "h2d", st: pipeline.Stats{BytesRead: 800, OutputBytes: 1000, H2D: pipeline.Metric{InBytes: 1500}},
			read: 0.8, copied: 1.5, pread: 0.8, preadLimits: true},
		// A chunk cache served most chunks, read by the epoch before: the
		// old scaling took the replay's 1000 bytes, which the run never
		// read again.
		{name: "chunk cache", st: pipeline.Stats{ChunkCacheHits: 10, BytesRead: 200, OutputBytes: 1000, Decompress: pipeline.Metric{OutBytes: 500}},
			read: 0.2, decoded: 0.5, pread: 0.2, preadLimits: true},
		// Nothing read while the measured batches were popped: the reads
		// bounded nothing.
		{name: "no reads", st: pipeline.Stats{OutputBytes: 1000, Decompress: pipeline.Metric{OutBytes: 500}},
			decoded: 0.5},
	} {
		s := newScale(c.st, srcs)
		if !near(s.read, c.read) || !near(s.decoded, c.decoded) || !near(s.copied, c.copied) || !slices.Equal(s.shares, []float64{2.0 / 3, 1.0 / 3}) {
			t.Errorf("%s: %+v; want read %v, decoded %v, copied %v per output byte, shares 2/3, 1/3", c.name, s, c.read, c.decoded, c.copied)
		}
		pr := Ceiling{Name: "pread replay", GBps: 10, Bytes: 1000}
		s.preadReplay(&pr)
		if !near(pr.PerOutput, c.pread) || c.pread > 0 && !near(pr.OutputGBps, 10/c.pread) || c.pread == 0 && pr.OutputGBps != 0 || pr.Limits != c.preadLimits {
			t.Errorf("%s: pread replay %v bytes per output byte (%v GB/s), limits %v; want %v, %v", c.name, pr.PerOutput, pr.OutputGBps, pr.Limits, c.pread, c.preadLimits)
		}
		get := Ceiling{Name: "GET replay", GBps: 10, Bytes: 1000, Limits: true}
		s.getReplay(&get)
		if !near(get.PerOutput, c.read) || c.read > 0 && (!near(get.OutputGBps, 10/c.read) || !get.Limits) {
			t.Errorf("%s: GET replay %v bytes per output byte, %v GB/s; want %v", c.name, get.PerOutput, get.OutputGBps, c.read)
		}
	}

	// A stage with nothing to do (every chunk raw, read in place) bounds
	// nothing.
	s := newScale(pipeline.Stats{OutputBytes: 100}, srcs[:1])
	c := Ceiling{GBps: 5, Limits: true}
	s.apply(&c, s.decoded)
	if c.OutputGBps != 0 || c.Limits {
		t.Errorf("no decoding: %+v; want no figure, not a limit", c)
	}
}

// TestCombine: a ceiling timed source by source is the rate at which the
// run's output, each source its share, passes through them: the output
// over the sum of the sources' times, not the sum of the measurements'
// bytes over the sum of their times (which weights each source by how
// long it was timed).
func TestCombine(t *testing.T) {
	s := scale{shares: []float64{2.0 / 3, 1.0 / 3}}
	each := []Ceiling{
		{Name: "assemble-only (cpu)", Detail: "a", GBps: 10, Bytes: 3e9, Time: 3e8, OutputGBps: 10, PerOutput: 1},
		{Name: "assemble-only (cpu)", Detail: "b", GBps: 100, Bytes: 30e9, Time: 3e8, OutputGBps: 100, PerOutput: 1, Note: "n"},
	}
	c := s.combine(each, []string{"image", "label"})
	want := 1 / (2.0/3/10 + 1.0/3/100) // 14.29, not (3+30)/0.6 = 55 GB/s
	if !near(c.GBps, want) || !near(c.OutputGBps, want) || c.PerOutput != 1 || c.Bytes != 33e9 || c.Time != 6e8 ||
		c.Detail != "per source: a; b" || c.Note != "n" {
		t.Errorf("combined %+v; want %v GB/s", c, want)
	}
	if len(c.Parts) != 2 || c.Parts[0] != (CeilingPart{Source: "image", GBps: 10, Share: 2.0 / 3}) || c.Parts[1].Source != "label" {
		t.Errorf("parts %+v", c.Parts)
	}
	each[1].GBps = 0 // a source not measured
	if c := s.combine(each, []string{"image", "label"}); c.OutputGBps != 0 {
		t.Errorf("a source without a rate: %v GB/s; want none", c.OutputGBps)
	}
	if c := s.combine(each[:1], []string{"image"}); c.GBps != 10 || c.OutputGBps != 10 || c.Parts != nil {
		t.Errorf("one source: %+v", c)
	}
}

// scenarioDecodeSample generates sc's dataset under dir and loads the
// decode sample of its measured batches, as measureCeilings does.
func scenarioDecodeSample(t *testing.T, sc *Scenario, dir string) *decodeSample {
	t.Helper()
	bs, _, err := openDataset(t.Context(), Env{Stderr: io.Discard}, sc, Options{Data: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replan(t.Context(), bs)
	if err != nil {
		t.Fatal(err)
	}
	rg, err := newRig(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rg.close()
	ds, err := loadDecodeSample(t.Context(), rg, rp)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestNVCOMPShare: decode-only (nvcomp) counts, for the scaling to output,
// only the decoded bytes of the chunks the GPU takes (here the zstd
// array's; the CPU decodes the gzip one's), and weights each codec's rate
// by its chunks' bytes in the sample.
func TestNVCOMPShare(t *testing.T) {
	dir := t.TempDir()
	sc := scenarioFile(t, dir, `"codec": "zstd", "level": 3,`, `"codec": ["zstd", "gzip"], "level": 3,`)
	ds := scenarioDecodeSample(t, sc, dir)
	var zstd, gzip int64
	for _, r := range ds.refs {
		switch r.chunk.Codec.Route().Compression {
		case zarr.CompressionZstd:
			zstd += int64(r.decodedBytes())
		case zarr.CompressionGzip:
			gzip += int64(r.decodedBytes())
		default:
			t.Fatalf("chunk %s: %v", r.chunk.Key, r.chunk.Codec.Route())
		}
	}
	if zstd == 0 || gzip == 0 {
		t.Fatalf("the sample decodes %d zstd and %d gzip bytes: want both", zstd, gzip)
	}
	sel, err := selectNVCOMP(ds, []int{1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if sel.bytes != [plan.Decoders]int64{plan.Zstd: zstd} || sel.decoded != zstd+gzip || !near(sel.share(), float64(zstd)/float64(zstd+gzip)) || sel.calls[plan.Zstd][0].total != int(zstd) {
		t.Errorf("the GPU takes %v bytes (zstd, LZ4, blosclz) of %d (share %v, call %d); want the %d zstd bytes of %d", sel.bytes, sel.decoded, sel.share(), sel.calls[plan.Zstd][0].total, zstd, zstd+gzip)
	}
	// A call capped below the sample still counts all the zstd chunks for
	// the share.
	if small, _ := selectNVCOMP(ds, []int{int(zstd / 2)}); small.bytes[plan.Zstd] != zstd || small.calls[plan.Zstd][0].total > int(zstd/2) {
		t.Errorf("capped call: %d zstd bytes counted, %d in the call", small.bytes[plan.Zstd], small.calls[plan.Zstd][0].total)
	}
	mix := &nvcompSample{bytes: [plan.Decoders]int64{300, 100, 200}}
	if got, want := mix.rate([plan.Decoders]float64{10, 50, 100}), 600/(300/10.0+100/50.0+200/100.0); !near(got, want) {
		t.Errorf("zstd 10, LZ4 50, blosclz 100 GB/s, 3:1:2: %v GB/s; want %v", got, want)
	}
}

// TestNVCOMPPerSource: decode-only (nvcomp) gives each source a call of
// its own (each source's engine decodes on a stream of its own), capped
// by the source's own wave buffer (its device_buffer_bytes, else the
// run's): an image and its label, the label's cap below its chunks,
// select every image chunk into the image's call and no more than the
// cap into the label's, and count all of them for the share.
func TestNVCOMPPerSource(t *testing.T) {
	dir := t.TempDir()
	sc := segFile(t, dir, `"label": "cells", "dtype": "u8"`, `"label": "cells", "dtype": "u8", "device_buffer_bytes": "1MiB"`)
	caps := sourceCallBytes(pipelineConfig(sc))
	if want := []int{nvcompCallBytes(64 << 20), nvcompCallBytes(1 << 20)}; !slices.Equal(caps, want) {
		t.Fatalf("call bytes per source %v; want %v", caps, want)
	}
	if got, want := sourceCallBytes(pipeline.Config{DeviceBufferBytes: 8 << 20}), []int{4 << 20}; !slices.Equal(got, want) {
		t.Errorf("one source: %v; want %v", got, want)
	}
	ds := scenarioDecodeSample(t, sc, dir)
	var per [2]int64
	for _, r := range ds.refs {
		per[r.source] += int64(r.decodedBytes())
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("sample: %d image and %d label bytes; want both", per[0], per[1])
	}
	caps = []int{1 << 30, int(per[1] / 2)} // the label's cap below its share of the sample
	sel, err := selectNVCOMP(ds, caps)
	if err != nil {
		t.Fatal(err)
	}
	zs := sel.calls[plan.Zstd]
	if len(zs) != 2 || zs[0].total != int(per[0]) || zs[1].total == 0 || zs[1].total > caps[1] || sel.bytes[plan.Zstd] != per[0]+per[1] {
		t.Errorf("calls of %d (image) and %d (label, cap %d) bytes, %d counted; want %d, at most the cap, %d",
			zs[0].total, zs[1].total, caps[1], sel.bytes[plan.Zstd], per[0], per[0]+per[1])
	}
	if _, err := selectNVCOMP(ds, caps[:1]); err == nil {
		t.Error("a chunk of a source without a cap was selected")
	}
}
