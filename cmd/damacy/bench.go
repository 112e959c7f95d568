package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/damacy-go/damacy/pipeline"
)

var cmdBench = &command{
	name:  "bench",
	usage: "bench [--json] [--drop-cache] [--trace FILE] [--data DIR] [--boxes-out FILE] [flags] SCENARIO.json",
	short: "run a benchmark scenario and report throughput, stages and ceilings",
	long: `Bench runs a scenario: it generates the dataset if it is absent (as 'damacy
gen' does), draws the boxes from the run's seed, streams the warm-up
batches, resets the statistics, streams the measured batches (sleeping
hold_ms between each pop and release, as a training step would), and
reports:

  throughput        output-tensor bytes in the output dtype / wall time of
                    the measured batches (damacy's definition), samples/s,
                    and the boxes' bytes in the source dtype / wall
  stages            per-stage busy time, count, best, bytes in and out
  read amplification  bytes read / bytes of the boxes in the source dtype
  caches            metadata and shard index hits and misses

and then the ceilings, measured in the same run over the same boxes:

  pread replay      the chunk byte ranges the measured boxes need (planned
                    again with package zarr, batch by batch, each chunk once
                    per batch), read with as many goroutines as the run had
                    IO threads into a staging buffer of up to 1 GiB, one
                    range after another, as the run reads into its slabs
  decode-only       those chunks decoded on the CPU, one decoder per core;
                    and, when the CUDA engine decoded with nvCOMP, what it
                    sends nvCOMP of them (zstd and LZ4 chunks, the streams
                    of blosc chunks; LZ4 with its GPU check), per codec in
                    one batched call as large as one of the run's waves
                    (half of device_buffer, at most 512 MiB)
  assemble-only     one batch gathered and cast from decoded chunks by the
                    assemble code the engines run (on the CPU; and on the
                    GPU for the CUDA engine)
  h2d               pinned host-to-device copies at the run's average copy
                    size (CUDA engine only)

Each ceiling is also given as output GB/s (its rate scaled by the run's
output bytes per byte it handles), and the throughput as a fraction of the
lowest one.

--trace FILE writes Chrome trace-event JSON (open it in Perfetto or
chrome://tracing): the run's phases, each pop and consumer hold, and the
pipeline's stage spans on one row per lane: the planner, each IO worker
(its reads of each wave), each CPU worker (its decoding of each wave), and
on the CUDA engine the copy, decode and assemble streams (each wave's H2D
copy, nvCOMP decode and assembly, placed on the host clock from CUDA
events).

SCENARIO is a file or a built-in name: ` + strings.Join(builtinNames(), ", ") + `.

` + scenarioHelp + `

Examples:
  damacy bench smoke
  damacy bench --drop-cache --json --boxes-out boxes.json throughput
  damacy bench --trace run.json --data /nvme/bench cmd/damacy/scenarios/default.json`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		o := new(benchOptions)
		fs.BoolVar(&o.json, "json", false, "write the report as JSON")
		fs.BoolVar(&o.dropCache, "drop-cache", false, "drop the dataset's files from the page cache before the run and before the pread replay (posix_fadvise DONTNEED)")
		fs.StringVar(&o.trace, "trace", "", "write a Chrome trace-event JSON file of the run's spans")
		fs.StringVar(&o.data, "data", "", "dataset directory (overrides the scenario's dataset.dir)")
		fs.StringVar(&o.boxesOut, "boxes-out", "", "write the boxes read to this JSON file (for the peers)")
		fs.BoolVar(&o.ceilings, "ceilings", true, "measure the ceilings after the run")
		fs.StringVar(&o.engine, "engine", "", "override run.engine: auto, host, cuda or cuda:N")
		fs.BoolVar(&o.verify, "verify", false, "check the first batch popped (a warm-up batch when there is one) against the reference reader")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return usagef("want one scenario, got %d arguments", len(args))
			}
			sc, err := loadScenario(args[0])
			if err != nil {
				return err
			}
			if o.engine != "" {
				if _, err := engineDevice(o.engine); err != nil {
					return usagef("--engine %v", err)
				}
				sc.Run.Engine = o.engine
			}
			rep, err := runBench(ctx, e, sc, o)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(e.stdout, rep)
			}
			rep.writeText(e.stdout)
			return nil
		}
	},
}

type benchOptions struct {
	json      bool
	dropCache bool
	trace     string
	data      string
	boxesOut  string
	ceilings  bool
	engine    string
	verify    bool
}

// benchReport is the result of a benchmark run.
type benchReport struct {
	Scenario    string    `json:"scenario"`
	Description string    `json:"description,omitempty"`
	Date        time.Time `json:"date"`
	Host        hostLine  `json:"host"`
	DatasetDir  string    `json:"dataset_dir"`
	Generated   bool      `json:"generated"` // the dataset was generated by this run
	Verified    bool      `json:"verified"`  // batch 0 matched the reference reader
	ColdCache   bool      `json:"cold_cache"`
	Engine      string    `json:"engine"`
	Decoder     string    `json:"decoder"`
	Device      string    `json:"device"` // where batches live: "cpu" or "cuda:N"
	Dtype       string    `json:"dtype"`
	BatchSize   int       `json:"batch_size"`
	SampleShape []int64   `json:"sample_shape"`
	Warmup      int       `json:"warmup"`
	Batches     int       `json:"batches"`
	HoldMS      int       `json:"hold_ms"`

	Startup      time.Duration `json:"startup_ns"`    // New until the first batch popped
	Wall         time.Duration `json:"wall_ns"`       // the measured batches
	OutputGBps   float64       `json:"output_gbps"`   // output bytes / wall
	SamplesPerS  float64       `json:"samples_per_s"` // samples / wall
	SourceGBps   float64       `json:"source_gbps"`   // box bytes in the source dtype / wall
	WireGBps     float64       `json:"wire_gbps"`     // bytes read / wall
	ReadAmp      float64       `json:"read_amplification"`
	Stats        benchStats    `json:"stats"`
	Ceilings     []ceiling     `json:"ceilings,omitempty"`
	Lowest       string        `json:"lowest_ceiling,omitempty"`
	OfLowest     float64       `json:"fraction_of_lowest,omitempty"` // OutputGBps / the lowest ceiling's output GB/s
	CeilingError string        `json:"ceiling_error,omitempty"`
}

// hostLine says where the run ran.
type hostLine struct {
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	CPUs   int    `json:"cpus"`
	GPU    string `json:"gpu,omitempty"`
	Driver string `json:"driver,omitempty"`
}

// benchStats is pipeline.Stats with durations in nanoseconds for JSON.
type benchStats struct {
	Stages   []stageStat      `json:"stages"`
	Counters map[string]int64 `json:"counters"`
}

type stageStat struct {
	Name     string        `json:"name"`
	Time     time.Duration `json:"time_ns"`
	Best     time.Duration `json:"best_ns"`
	Count    int64         `json:"count"`
	InBytes  int64         `json:"in_bytes"`
	OutBytes int64         `json:"out_bytes"`
}

func newBenchStats(st pipeline.Stats) benchStats {
	m := func(name string, x pipeline.Metric) stageStat {
		return stageStat{Name: name, Time: x.Time, Best: x.Best, Count: x.Count, InBytes: x.InBytes, OutBytes: x.OutBytes}
	}
	return benchStats{
		Stages: []stageStat{
			m("plan", st.Plan), m("io", st.IO), m("check", st.Check), m("h2d", st.H2D), m("decompress", st.Decompress),
			m("assemble", st.Assemble), m("pop wait io", st.PopWaitIO),
			m("pop wait compute", st.PopWaitCompute), m("flush wait", st.FlushWait),
		},
		Counters: map[string]int64{
			"zarr_meta_hits": st.ZarrMetaHits, "zarr_meta_misses": st.ZarrMetaMisses,
			"shard_index_hits": st.ShardIndexHits, "shard_index_misses": st.ShardIndexMisses,
			"batches_emitted": st.BatchesEmitted, "batches_truncated": st.BatchesTruncated,
			"waves_emitted": st.WavesEmitted, "gpu_bytes_committed": st.GPUBytesCommitted,
			"samples_emitted": st.SamplesEmitted, "chunks_decoded": st.ChunksDecoded,
			"chunks_gpu": st.ChunksGPU, "chunks_redecoded": st.ChunksRedecoded, "chunks_fill": st.ChunksFill, "chunks_deduped": st.ChunksDeduped,
			"read_ops": st.ReadOps, "bytes_read": st.BytesRead, "box_bytes": st.BoxBytes,
			"output_bytes": st.OutputBytes,
		},
	}
}

// pipelineConfig is the pipeline configuration of a scenario's run.
func pipelineConfig(sc *Scenario) pipeline.Config {
	r := &sc.Run
	shape := make([]int, len(r.SampleShape))
	for i, n := range r.SampleShape {
		shape[i] = int(n)
	}
	dt, _ := pipeline.ParseDtype(r.Dtype)
	dev, _ := engineDevice(r.Engine)
	return pipeline.Config{
		BatchSize:         r.BatchSize,
		SampleShape:       shape,
		Dtype:             dt,
		HostBufferBytes:   int64(r.HostBuffer),
		DeviceBufferBytes: int64(r.DeviceBuffer),
		LookaheadBatches:  r.Lookahead,
		IOThreads:         r.IOThreads,
		MaxGPUMemoryBytes: int64(r.GPUCap),
		Device:            dev,
	}
}

// ioThreads is the number of readers the run had: the scenario's, or the
// pipeline's documented default.
func ioThreads(sc *Scenario) int {
	if sc.Run.IOThreads > 0 {
		return sc.Run.IOThreads
	}
	return min(max(runtime.NumCPU(), 4), 64)
}

// runBench runs a scenario and measures its ceilings.
func runBench(ctx context.Context, e *env, sc *Scenario, o *benchOptions) (*benchReport, error) {
	var tr *tracer
	if o.trace != "" {
		tr = newTracer()
	}
	dir := sc.dataDir(o.data)
	t := time.Now()
	gs, err := ensureDataset(ctx, e, &sc.Dataset, dir, false)
	if err != nil {
		return nil, err
	}
	if gs.RawBytes > 0 {
		tr.span(traceRowPhases, "phase", "generate dataset", t, time.Now(), nil)
	}
	bs, err := newBoxSet(sc, dir, drawBoxes(sc))
	if err != nil {
		return nil, err
	}
	if o.boxesOut != "" {
		if err := bs.write(o.boxesOut); err != nil {
			return nil, err
		}
	}
	if o.dropCache {
		if err := dropDatasetCache(dir); err != nil {
			return nil, err
		}
	}
	rep := &benchReport{
		Scenario: sc.Name, Description: sc.Description, Date: time.Now().UTC().Truncate(time.Second),
		Host:       hostLine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()},
		DatasetDir: bs.DatasetDir, Generated: gs.RawBytes > 0, ColdCache: o.dropCache,
		Dtype: bs.Dtype, BatchSize: sc.Run.BatchSize, SampleShape: sc.Run.SampleShape,
		Warmup: sc.Run.Warmup, Batches: sc.Run.Batches, HoldMS: sc.Run.HoldMS,
	}
	st, err := stream(ctx, e, sc, bs, rep, tr, o.verify)
	if err != nil {
		return nil, err
	}
	rep.Engine, rep.Decoder = st.Engine, st.Decoder
	rep.Stats = newBenchStats(st)
	w := rep.Wall.Seconds()
	rep.OutputGBps = float64(st.OutputBytes) / w / 1e9
	rep.SamplesPerS = float64(st.SamplesEmitted) / w
	// The boxes' bytes are known exactly; the pipeline's BoxBytes counts
	// at plan time, which for lookahead batches falls before the reset.
	box := bs.measuredBoxBytes()
	rep.SourceGBps = float64(box) / w / 1e9
	rep.WireGBps = float64(st.BytesRead) / w / 1e9
	rep.ReadAmp = ratio(st.BytesRead, box)
	if strings.HasPrefix(rep.Device, "cuda") {
		rep.Host.GPU, rep.Host.Driver = gpuLine(rep.Device)
	}
	if o.ceilings {
		t := time.Now()
		cs, err := measureCeilings(ctx, e, sc, bs, rep, st, o, tr)
		tr.span(traceRowPhases, "phase", "ceilings", t, time.Now(), nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			rep.CeilingError = err.Error()
			fmt.Fprintf(e.stderr, "damacy: warning: ceilings: %v\n", err)
		}
		rep.Ceilings = cs
		for _, c := range cs {
			if c.Limits && c.OutputGBps > 0 && (rep.Lowest == "" || c.OutputGBps < lowestOf(cs, rep.Lowest)) {
				rep.Lowest = c.Name
			}
		}
		if rep.Lowest != "" {
			rep.OfLowest = rep.OutputGBps / lowestOf(cs, rep.Lowest)
		}
	}
	if tr != nil {
		if err := tr.write(o.trace); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func lowestOf(cs []ceiling, name string) float64 {
	for _, c := range cs {
		if c.Name == name {
			return c.OutputGBps
		}
	}
	return 0
}

// stream runs the pipeline over the boxes: warm-up batches, a stats reset,
// then the measured batches. It fills rep's timing fields.
func stream(ctx context.Context, e *env, sc *Scenario, bs *boxSet, rep *benchReport, tr *tracer, verify bool) (pipeline.Stats, error) {
	t0 := time.Now()
	cfg := pipelineConfig(sc)
	cfg.Logger = newLogger(e.stderr)
	if tr != nil {
		cfg.Trace = tr.pipelineSpan
	}
	p, err := pipeline.New(cfg)
	if err != nil {
		return pipeline.Stats{}, err
	}
	defer p.Close()
	err = p.PushSeq(func(yield func(pipeline.Sample) bool) {
		for _, s := range bs.Samples {
			if !yield(bs.sample(s)) {
				return
			}
		}
	})
	if err != nil {
		return pipeline.Stats{}, err
	}
	hold := time.Duration(sc.Run.HoldMS) * time.Millisecond
	total := sc.Run.Warmup + sc.Run.Batches
	prog := startProgress(e, "streaming", "batches", int64(total))
	defer prog.finish()
	var start time.Time
	for i := range total {
		if i == sc.Run.Warmup {
			p.StatsReset()
			start = time.Now()
			if i > 0 {
				tr.span(traceRowPhases, "phase", "warmup", t0, start, nil)
			}
		}
		tp := time.Now()
		b, err := p.Pop(ctx)
		if err != nil {
			return pipeline.Stats{}, fmt.Errorf("batch %d: %w", i, err)
		}
		th := time.Now()
		if i == 0 {
			rep.Startup = th.Sub(t0)
			rep.Device = b.Info().Device
			if verify {
				if err := verifyBatch(b, bs, bs.Samples[:sc.Run.BatchSize]); err != nil {
					b.Release()
					return pipeline.Stats{}, fmt.Errorf("verify: %w", err)
				}
				rep.Verified = true
				tr.span(traceRowPhases, "phase", "verify batch 0", th, time.Now(), nil)
			}
		}
		tr.span(traceRowPop, "batch", fmt.Sprintf("pop %d", i), tp, th, map[string]any{"batch": i, "warmup": i < sc.Run.Warmup})
		if hold > 0 {
			select {
			case <-time.After(hold):
			case <-ctx.Done():
				b.Release()
				return pipeline.Stats{}, ctx.Err()
			}
			tr.span(traceRowHold, "batch", fmt.Sprintf("hold %d", i), th, time.Now(), map[string]any{"batch": i})
		}
		b.Release()
		prog.add(1)
	}
	rep.Wall = time.Since(start)
	tr.span(traceRowPhases, "phase", "measured batches", start, start.Add(rep.Wall), nil)
	return p.Stats(), nil
}

// dropDatasetCache drops every file of the dataset from the page cache.
func dropDatasetCache(dir string) error {
	var errs []error
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type().IsRegular() {
			if err := dropFileCache(path); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		return fmt.Errorf("--drop-cache: %w (and %d more)", errs[0], len(errs)-1)
	}
	return nil
}

func (r *benchReport) writeText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("scenario     %s\n", r.Scenario)
	if r.Description != "" {
		p("             %s\n", r.Description)
	}
	p("host         %s/%s, %d CPUs", r.Host.OS, r.Host.Arch, r.Host.CPUs)
	if r.Host.GPU != "" {
		p(", %s (driver CUDA %s)", r.Host.GPU, r.Host.Driver)
	}
	p("\n")
	cache := "warm page cache"
	if r.ColdCache {
		cache = "page cache dropped before the run"
	}
	p("dataset      %s (%s)\n", r.DatasetDir, cache)
	p("engine       %s on %s, decoder %s\n", r.Engine, r.Device, r.Decoder)
	p("run          %d batches of %d x %s %s after %d warm-up; hold %d ms; startup %s\n",
		r.Batches, r.BatchSize, ints(r.SampleShape), r.Dtype, r.Warmup, r.HoldMS, r.Startup.Round(time.Millisecond))
	p("\n")
	p("throughput   %.3f GB/s of %s output, %.1f samples/s, wall %s\n", r.OutputGBps, r.Dtype, r.SamplesPerS, r.Wall.Round(time.Millisecond))
	p("source       %.3f GB/s of box bytes in the source dtype\n", r.SourceGBps)
	p("read         %.3f GB/s (wire), read amplification %.2f\n", r.WireGBps, r.ReadAmp)
	p("\n")
	p("%-18s %10s %7s %8s %10s %12s %12s\n", "stage", "time", "busy", "count", "best", "in", "out")
	for _, s := range r.Stats.Stages {
		if s.Count == 0 {
			continue
		}
		p("%-18s %10s %6.0f%% %8d %10s %12s %12s\n", s.Name, s.Time.Round(time.Microsecond),
			100*s.Time.Seconds()/r.Wall.Seconds(), s.Count, s.Best.Round(time.Microsecond), formatBytes(s.InBytes), formatBytes(s.OutBytes))
	}
	c := r.Stats.Counters
	p("\n")
	p("reads        %d ops, %s (%s per op)\n", c["read_ops"], formatBytes(c["bytes_read"]), formatBytes(c["bytes_read"]/max(c["read_ops"], 1)))
	p("chunks       %d decoded (%d on the GPU), %d fill, %d deduplicated\n", c["chunks_decoded"], c["chunks_gpu"], c["chunks_fill"], c["chunks_deduped"])
	p("caches       metadata %d hits, %d misses; shard index %d hits, %d misses\n", c["zarr_meta_hits"], c["zarr_meta_misses"], c["shard_index_hits"], c["shard_index_misses"])
	if len(r.Ceilings) > 0 {
		p("\n")
		p("%-22s %22s %15s   %s\n", "ceiling", "rate", "as output", "measured over the run's boxes")
		for _, cl := range r.Ceilings {
			out := "-"
			if cl.OutputGBps > 0 {
				out = fmt.Sprintf("%.3f GB/s", cl.OutputGBps)
			}
			note := cl.Detail
			if cl.Note != "" {
				note += "; " + cl.Note
			}
			if !cl.Limits {
				note += "; not a limit of this engine"
			}
			p("%-22s %10.3f GB/s %-7s %15s   %s\n", cl.Name, cl.GBps, cl.Of, out, note)
		}
		if r.Lowest != "" {
			p("\nlowest ceiling: %s; throughput is %.0f%% of it\n", r.Lowest, 100*r.OfLowest)
		}
	}
	if r.CeilingError != "" {
		p("ceilings incomplete: %s\n", r.CeilingError)
	}
}
