package bench

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cmd/damacy/internal/netshape"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/remote"
)

// Env is where a run writes besides its report.
type Env struct {
	Stderr   io.Writer    // messages ("damacy: ...")
	Progress bool         // Stderr is a terminal: draw a status line there
	Logger   *slog.Logger // the pipeline's log lines
}

// Options says how Run runs a scenario.
type Options struct {
	DropCache bool   // drop the dataset's files from the page cache before the run and the pread replay
	Trace     string // write a Chrome trace-event JSON file of the run's spans here
	Data      string // the dataset's directory or remote URI, instead of the scenario's dataset.dir
	BoxesOut  string // write the boxes read to this JSON file (for the peers)
	Ceilings  bool   // measure the ceilings after the run
	Verify    bool   // check the first batch popped, every tensor, against the reference reader
	Compare   bool   // measure the comparisons (run.compare): see CompareReport
	Profile   string // write a CPU profile (pprof) of the measured batches here
	GetsOut   string // write the GET replay's GETs here (GETList; a remote dataset only)
	// Link, when set, reads a remote dataset through a loopback proxy
	// shaped as this link (package netshape).
	Link *netshape.Link
	// Duration, when positive, runs the measured batches for this long
	// instead of the scenario's count (drawing more boxes, or more epochs),
	// sampling memory and throughput every second.
	Duration time.Duration
}

// pipelineConfig is the pipeline configuration of a scenario's run: its
// sources (run.config.sources) in one pipeline, with run.config.augment as
// the scenario gives it (its axes are the box's, the image's).
func pipelineConfig(sc *Scenario) pipeline.Config {
	r := &sc.Run
	c := r.Config
	c.SampleShape = slices.Clone(r.Config.SampleShape)
	srcs := sc.sources()
	c.Sources = nil
	if len(r.Config.Sources) > 0 {
		for _, s := range srcs {
			c.Sources = append(c.Sources, s.pipelineSource())
		}
	}
	c.Dtype = srcs[0].dtype
	c.Device, _ = base.EngineDevice(r.Engine)
	return c
}

// apartConfigs is one pipeline configuration per source of the run, each
// reading its source alone (boxSet.project gives its samples) as
// pipelineConfig's pipeline reads it: its own sample shape (the image axes
// it reads), buffers and share of run.config.max_gpu_memory_bytes (the
// pipeline gives each of n sources 1/n of it), and run.config.augment
// with its axes mapped to the source's (augmentFor: a label source reads
// the space axes, image axis a its axis slices.Index(s.axes, a); the
// same draws, so the same geometry per sample), with the intensity
// transform only where it applies to it.
func apartConfigs(sc *Scenario) []pipeline.Config {
	one := pipelineConfig(sc)
	srcs := sc.sources()
	var out []pipeline.Config
	for _, s := range srcs {
		c := one
		// The samples name the source's array (boxSet.project): a
		// pipeline's first source reads the sample's URI.
		ps := s.pipelineSource()
		ps.Label = ""
		c.Sources, c.Dtype = []pipeline.Source{ps}, s.dtype
		c.MaxGPUMemoryBytes = one.MaxGPUMemoryBytes / int64(len(srcs))
		c.SampleShape = nil
		for _, a := range s.axes {
			c.SampleShape = append(c.SampleShape, one.SampleShape[a])
		}
		var intensity []string
		if slices.Contains(sc.intensitySources(), s.name) {
			intensity = []string{s.name}
		}
		c.Augment = sc.augmentFor(s.axes, intensity)
		if c.Logger != nil {
			c.Logger = c.Logger.With("source", s.name)
		}
		out = append(out, c)
	}
	return out
}

// ioThreads is the number of readers the run had: the scenario's, or the
// pipeline's documented default.
func ioThreads(sc *Scenario) int {
	if sc.Run.Config.IOThreads > 0 {
		return sc.Run.Config.IOThreads
	}
	return min(max(runtime.NumCPU(), 4), 64)
}

// Run runs a scenario (generating its dataset if it is absent) and
// measures its ceilings: see damacy help bench.
func Run(ctx context.Context, e Env, sc *Scenario, o Options) (*Report, error) {
	var tr *tracer
	if o.Trace != "" {
		tr = newTracer()
	}
	t := time.Now()
	if o.Duration > 0 && sc.Run.chunked() {
		return nil, fmt.Errorf("--duration: run.boxes chunks reads every chunk once; give random boxes (--boxes SHAPE)")
	}
	bs, gs, err := openDataset(ctx, e, sc, o)
	if err != nil {
		return nil, err
	}
	defer bs.remote.close()
	if (o.GetsOut != "" || o.Link != nil) && bs.remote == nil {
		return nil, fmt.Errorf("--gets-out and --link apply to a remote dataset (--data s3://...), not to %s", bs.DatasetDir)
	}
	if gs.RawBytes > 0 {
		tr.span(traceRowPhases, "phase", "generate dataset", t, time.Now(), nil)
	}
	if o.BoxesOut != "" {
		if err := bs.write(o.BoxesOut); err != nil {
			return nil, err
		}
	}
	if o.DropCache {
		if err := dropDatasetCache(bs.DatasetDir); err != nil {
			return nil, err
		}
	}
	compare := (o.Compare || sc.Run.Compare) && sc.Comparable()
	if o.Compare && !sc.Comparable() {
		return nil, fmt.Errorf("--compare: scenario %s has neither run.config.augment nor several run.config.sources: nothing to compare", sc.Name)
	}
	rep := &Report{
		Scenario: sc.Name, Description: sc.Description, Date: time.Now().UTC().Truncate(time.Second),
		Host:       Host{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()},
		DatasetDir: remote.Redact(bs.DatasetDir), Data: bs.source(sc), Generated: gs.RawBytes > 0, ColdCache: o.DropCache,
		Dtype: bs.Dtype, BatchSize: sc.Run.Config.BatchSize, SampleShape: sc.Run.shape(),
		Warmup: sc.Run.Warmup, HoldMS: sc.Run.HoldMS, Keep: sc.Run.Keep, BatchSlots: sc.Run.Config.BatchSlots, ChunkCache: int64(sc.Run.Config.ChunkCacheBytes), Duration: o.Duration,
		Sampler: bs.Sampler, Augment: sc.augmentReport(),
	}
	if sc.array != nil {
		rep.DatasetDir = sc.array.path
	}
	if bs.Sampler == "foreground" {
		rep.ForegroundShare = float64(bs.foreground) / float64(max(len(bs.Samples), 1))
	}
	st, err := stream(ctx, e, sc, bs, rep, tr, o)
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
	box := rep.boxBytes
	rep.SourceGBps = float64(box) / w / 1e9
	rep.WireGBps = float64(st.BytesRead) / w / 1e9
	rep.MappedShare = base.Ratio(st.BytesMapped, st.BytesRead)
	rep.ReadAmp = base.Ratio(st.BytesRead, box)
	if strings.HasPrefix(rep.Device, "cuda") {
		rep.Host.GPU, rep.Host.Driver = gpuLine(rep.Device)
	}
	if compare {
		t := time.Now()
		cr, err := measureComparisons(ctx, e, sc, bs, rep, o)
		tr.span(traceRowPhases, "phase", "comparisons", t, time.Now(), nil)
		if err != nil {
			return nil, fmt.Errorf("comparisons: %w", err)
		}
		rep.Compare = cr
	}
	if o.GetsOut != "" && !o.Ceilings {
		rp, err := replan(ctx, bs)
		if err == nil {
			err = writeGETs(o.GetsOut, bs.remote, getReplayRequests(rp, getMerge(sc)), getMerge(sc), len(rp.batches))
		}
		if err != nil {
			return nil, err
		}
	}
	if o.Ceilings {
		t := time.Now()
		cs, err := measureCeilings(ctx, sc, bs, rep, st, o, tr)
		tr.span(traceRowPhases, "phase", "ceilings", t, time.Now(), nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			rep.CeilingError = err.Error()
			fmt.Fprintf(e.Stderr, "damacy: warning: ceilings: %v\n", err)
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
		if err := tr.write(o.Trace); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func lowestOf(cs []Ceiling, name string) float64 {
	for _, c := range cs {
		if c.Name == name {
			return c.OutputGBps
		}
	}
	return 0
}

// stream runs the pipeline over the boxes: warm-up batches, a stats reset,
// then the measured batches (every epoch's, or for o.Duration). It fills
// rep's timing and measured-batch fields.
func stream(ctx context.Context, e Env, sc *Scenario, bs *boxSet, rep *Report, tr *tracer, o Options) (pipeline.Stats, error) {
	t0 := time.Now()
	cfg := pipelineConfig(sc)
	cfg.Logger = e.Logger
	bs.remote.route(&cfg)
	if tr != nil {
		cfg.Trace = tr.pipelineSpan
	}
	p, err := pipeline.New(cfg)
	if err != nil {
		return pipeline.Stats{}, err
	}
	rep.StartupNew = time.Since(t0)
	defer p.Close()
	if err := p.PushSeq(bs.sequence(sc, o.Duration > 0)); err != nil {
		return pipeline.Stats{}, err
	}
	if o.Duration == 0 {
		// The measured batches' last one may be ragged (run.boxes chunks).
		if err := p.Flush(); err != nil {
			return pipeline.Stats{}, err
		}
	}
	hold := time.Duration(sc.Run.HoldMS) * time.Millisecond
	total := sc.Run.Warmup + sc.Run.Batches*sc.Run.epochs()
	if o.Duration > 0 {
		total = 0 // until the duration is over
	}
	prog := startProgress(e, "streaming", "batches", int64(total))
	defer prog.finish()
	var start time.Time
	var cpu time.Duration
	var verifyWall, verifyCPU time.Duration // verifying a measured batch
	var link netshape.Stats
	var m *measure
	var kept *pipeline.Batch // run.keep: the batch popped last
	defer func() {
		if kept != nil {
			kept.Release()
		}
	}()
	defer func() {
		if m != nil && m.soak != nil {
			m.soak.finish() // a run that failed: stop sampling
		}
	}()
	for i := 0; total == 0 || i < total; i++ {
		if i == sc.Run.Warmup {
			p.StatsReset()
			start, cpu, link = time.Now(), processCPU(), bs.remote.linkStats()
			if i > 0 {
				tr.span(traceRowPhases, "phase", "warmup", t0, start, nil)
			}
			m = newMeasure(p, sc, bs, start, o, runDevice(p, cfg))
			if o.Profile != "" {
				stop, err := startProfile(o.Profile)
				if err != nil {
					return pipeline.Stats{}, err
				}
				defer stop()
			}
		} else if o.Duration > 0 && i > sc.Run.Warmup && time.Since(start) >= o.Duration {
			break
		}
		tp := time.Now()
		b, err := p.Pop(ctx)
		if err != nil {
			return pipeline.Stats{}, fmt.Errorf("batch %d: %w", i, err)
		}
		th := time.Now()
		if m != nil {
			if i == sc.Run.Warmup {
				// The ceilings' assemble-only applies these transforms.
				for _, t := range b.Tensors() {
					rep.transforms = append(rep.transforms, slices.Clone(t.Transforms()))
				}
			}
			m.popped(p, b, th)
		}
		if i == 0 {
			rep.Startup = th.Sub(t0)
			rep.Device = b.Info().Device
			if o.Verify {
				c := processCPU()
				if err := verifyBatch(b, bs, bs.Samples[:b.Len()]); err != nil {
					b.Release()
					return pipeline.Stats{}, fmt.Errorf("verify: %w", err)
				}
				rep.Verified = true
				tv := time.Now()
				tr.span(traceRowPhases, "phase", "verify batch 0", th, tv, nil)
				if m != nil { // no warm-up: the check is not the run's
					verifyWall, verifyCPU = tv.Sub(th), processCPU()-c
				}
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
		if sc.Run.Keep {
			// Released once the next batch is popped.
			if kept != nil {
				kept.Release()
			}
			kept = b
		} else {
			b.Release()
		}
		prog.add(1)
	}
	rep.Wall, rep.CPU, rep.MeasuredStart = time.Since(start)-verifyWall, processCPU()-cpu-verifyCPU, start
	if rd := bs.remote; rd != nil && rd.proxy != nil {
		rep.Link = newLinkReport(rd.proxy.Link(), link, rd.linkStats(), rep.Wall)
	}
	pprof.StopCPUProfile() // the measured batches only (a no-op without --profile)
	tr.span(traceRowPhases, "phase", "measured batches", start, start.Add(rep.Wall), nil)
	st := p.Stats()
	m.finish(rep)
	if rep.Soak != nil {
		rep.Soak.checkLimits(sc, st.Engine)
	}
	return st, nil
}

// startProfile starts a CPU profile into the file path; stop ends it and
// closes the file.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// runDevice is where p puts its batches: "cuda:N" on the CUDA engine,
// else "cpu".
func runDevice(p *pipeline.Pipeline, cfg pipeline.Config) string {
	if p.Stats().Engine != "cuda" {
		return "cpu"
	}
	if strings.HasPrefix(cfg.Device, "cuda:") {
		return cfg.Device
	}
	return "cuda:0"
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
