package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/ptx"
)

// Ceiling is one bound measured after the run, over the run's own data.
type Ceiling struct {
	Name   string        `json:"name"`
	GBps   float64       `json:"gbps"`   // the measurement's own rate
	Of     string        `json:"of"`     // what GBps counts: read, decoded, output or copied bytes
	Detail string        `json:"detail"` // how it was measured
	Bytes  int64         `json:"bytes"`  // bytes the measurement handled
	Time   time.Duration `json:"time_ns"`
	// OutputGBps is GBps scaled to output bytes: the throughput the run
	// could reach if this were the only limit. It is GBps / PerOutput.
	OutputGBps float64 `json:"output_gbps"`
	// PerOutput is the bytes the measured stage handles per byte of the
	// run's output, every source's (see scale): 1 for a ceiling counted
	// in output bytes; 0 where the stage handles none.
	PerOutput float64 `json:"bytes_per_output"`
	// Parts is, for a ceiling timed source by source (assemble-only of a
	// run with several sources), each source's rate and share of the
	// output; GBps is then their rate at the run's mix.
	Parts []CeilingPart `json:"parts,omitempty"`
	// Limits is false for a ceiling that does not bound this engine (the
	// CPU decoders when the GPU decoded, the CPU assemble under the CUDA
	// engine); such ceilings are shown but not counted as the lowest.
	Limits bool   `json:"limits"`
	Note   string `json:"note,omitempty"`
	// Start is when the measurement began and CPU this process's CPU
	// time over it (the GET replay's: the client's cost of its GETs).
	Start time.Time     `json:"start,omitzero"`
	CPU   time.Duration `json:"cpu_ns,omitempty"`
}

// CeilingPart is one source's measurement of a ceiling timed source by
// source.
type CeilingPart struct {
	Source string  `json:"source"`
	GBps   float64 `json:"gbps"`  // output bytes of the source's batch per second
	Share  float64 `json:"share"` // the source's share of the run's output bytes
}

// Bounds of the ceiling measurements, so that they take seconds, not
// minutes, and memory stays bounded whatever the scenario.
const (
	decodeSampleBytes   = 512 << 20 // compressed bytes decoded by decode-only
	assembleArenaBytes  = 512 << 20 // decoded bytes behind assemble-only
	minCeilingTime      = 300 * time.Millisecond
	maxCeilingRepeats   = 50
	h2dMinBytes         = 1 << 30
	replayMergeMaxBytes = 4 << 20 // exactly adjacent ranges of a batch merge up to this size
)

// measureCeilings measures the ceilings after the run (see damacy help
// bench). A ceiling that cannot be measured is left out, with the reason
// in the returned error; the others are still returned.
func measureCeilings(ctx context.Context, sc *Scenario, bs *boxSet, rep *Report, st pipeline.Stats, o Options, tr *tracer) ([]Ceiling, error) {
	t := time.Now()
	rp, err := replan(ctx, bs)
	if err != nil {
		return nil, fmt.Errorf("planning the boxes again: %w", err)
	}
	tr.span(traceRowPhases, "ceiling", "replan", t, time.Now(), nil)
	sl := newScale(st, rep.Sources)
	gpu := strings.HasPrefix(rep.Device, "cuda")
	var cs []Ceiling
	var errs []error

	// pread replay, or the GET replay of a remote dataset.
	var rg *rig
	var c Ceiling
	if rd := bs.remote; rd != nil {
		if rg, err = newRig(ioConcurrency(sc), rd.store); err != nil {
			return nil, err
		}
		defer rg.close()
		reqs := getReplayRequests(rp, getMerge(sc))
		if o.GetsOut != "" {
			if err := writeGETs(o.GetsOut, rd, reqs, getMerge(sc), len(rp.batches)); err != nil {
				return nil, err
			}
		}
		c, err = getReplay(ctx, rd, rg, reqs, tr)
		if err == nil {
			sl.getReplay(&c)
		}
	} else {
		if rg, err = newRig(ioThreads(sc), nil); err != nil {
			return nil, err
		}
		defer rg.close()
		c, err = preadReplay(ctx, bs, rg, rp, o, tr)
		if err == nil {
			sl.preadReplay(&c)
		}
	}
	if err != nil {
		return nil, err
	}
	cs = append(cs, c)

	// decode-only, on the CPU and (CUDA engine with nvCOMP) on the GPU,
	// scaled by the bytes the run decoded per output byte.
	t = time.Now()
	ds, err := loadDecodeSample(ctx, rg, rp)
	if err != nil {
		errs = append(errs, fmt.Errorf("decode-only: %w", err))
	} else {
		c, err = decodeOnly(ctx, rg, ds)
		tr.span(traceRowPhases, "ceiling", "decode-only (cpu)", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("decode-only: %w", err))
		} else {
			c.Limits = st.ChunksGPU == 0
			sl.apply(&c, sl.decoded)
			if !c.Limits {
				c.Note = fmt.Sprintf("%d of %d chunks decoded on the GPU", st.ChunksGPU, st.ChunksDecoded)
			}
			cs = append(cs, c)
		}
	}
	if gpu && ds != nil && st.ChunksGPU > 0 {
		t = time.Now()
		c, share, err := nvcompDecodeOnly(rep.Device, ds, sourceCallBytes(pipelineConfig(sc)))
		tr.span(traceRowPhases, "ceiling", "decode-only (nvcomp)", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("decode-only (nvcomp): %w", err))
		} else {
			// The GPU decodes only the chunks it takes, the CPU the others.
			sl.apply(&c, sl.decoded*share)
			if share < 1 {
				c.Note = fmt.Sprintf("the GPU takes %.0f%% of the decoded bytes", 100*share)
			}
			cs = append(cs, c)
		}
	}

	// assemble-only, on the CPU and (CUDA engine) on the GPU: every
	// source's batch, with the run's transforms.
	t = time.Now()
	abs, err := prepareAssembles(ctx, rg, rp, bs, rep.transforms)
	if err != nil {
		errs = append(errs, fmt.Errorf("assemble-only: %w", err))
	} else {
		var each []Ceiling
		for _, ab := range abs {
			each = append(each, assembleOnlyCPU(ab))
		}
		c := sl.combine(each, sourceNames(bs))
		c.Limits = !gpu
		cs = append(cs, c)
		tr.span(traceRowPhases, "ceiling", "assemble-only (cpu)", t, time.Now(), nil)
	}
	if gpu {
		t = time.Now()
		gcs, err := gpuCeilings(rep.Device, st, sl, abs, sourceNames(bs))
		tr.span(traceRowPhases, "ceiling", "gpu ceilings", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, err)
		}
		cs = append(cs, gcs...)
	}
	return cs, errors.Join(errs...)
}

// scale is what each ceiling's stage handles per byte of the run's
// output, every source's: the factor that turns a ceiling's own rate
// into output GB/s, the throughput the run could reach with that stage
// alone to do. Work and output are both the run's counters over the
// measured batches, so that both count the same sources and the same
// time: the work the stages did while the measured batches were popped
// (each chunk once per batch, however many of its boxes use it, as the
// engines plan it; less what a chunk cache served; without what the
// batches planned ahead of the stats reset did before it), against the
// bytes popped meanwhile. A ceiling's own byte count (what a replay read,
// what decode-only decoded) is of the measurement alone and scales
// nothing.
type scale struct {
	read    float64   // bytes read (pread, mapped or GET, gaps included) per output byte
	preads  float64   // of which by pread (not copied from mapped files)
	decoded float64   // bytes decoded per output byte, CPU and GPU
	copied  float64   // bytes copied to the GPU per output byte (CUDA engine)
	shares  []float64 // each source's share of the output bytes
}

// newScale is the scale of a run with stats st whose sources' tensors
// were srcs.
func newScale(st pipeline.Stats, srcs []SourceReport) scale {
	out := float64(max(st.OutputBytes, 1))
	s := scale{
		read: float64(st.BytesRead) / out, preads: float64(st.BytesRead-st.BytesMapped) / out,
		decoded: float64(st.Decompress.OutBytes) / out, copied: float64(st.H2D.InBytes) / out,
	}
	var total int64
	for _, src := range srcs {
		total += src.OutputBytes
	}
	for _, src := range srcs {
		s.shares = append(s.shares, float64(src.OutputBytes)/float64(max(total, 1)))
	}
	return s
}

// apply scales c by per, the bytes its stage handles per output byte. A
// stage that handles none does not limit the run.
func (s *scale) apply(c *Ceiling, per float64) {
	c.PerOutput = per
	if per <= 0 {
		c.OutputGBps, c.Limits = 0, false
		return
	}
	c.OutputGBps = c.GBps / per
}

// preadReplay scales the pread replay by the bytes the run read by pread
// per output byte, not those it copied from mapped files instead (which
// preads do not bound). A run that read (nearly) everything so is not
// bound by preads at all; its figure is then what the preads would have
// given had the run read everything by pread.
func (s *scale) preadReplay(c *Ceiling) {
	if s.preads > 0 && s.preads >= 0.01*s.read {
		c.Limits = true
		s.apply(c, s.preads)
		return
	}
	c.Limits = false
	if s.read > 0 {
		c.Detail += fmt.Sprintf("; the run copied %.0f%% of its bytes from mapped files", 100*(1-s.preads/s.read))
	}
	s.apply(c, s.read)
}

// getReplay scales the GET replay by the bytes the run's GETs transferred
// per output byte, gaps included as the replay's are.
func (s *scale) getReplay(c *Ceiling) { s.apply(c, s.read) }

// combine is the ceiling of measurements made source by source, one batch
// of each (names, in order): the rate at which the run's output, each
// source's share of it (s.shares), passes through all of them in turn,
// the output bytes over the sum of the times the sources' shares take.
func (s *scale) combine(cs []Ceiling, names []string) Ceiling {
	if len(cs) == 1 {
		c := cs[0]
		c.PerOutput = 1
		return c
	}
	c := cs[0]
	c.Detail = "per source: " + c.Detail
	var secs float64 // per output byte
	for k, o := range cs {
		if k > 0 {
			c.Bytes += o.Bytes
			c.Time += o.Time
			c.Detail += "; " + o.Detail
			if o.Note != "" {
				c.Note = strings.TrimPrefix(c.Note+"; "+o.Note, "; ")
			}
		}
		share := 1 / float64(len(cs)) // no output counted (a run that popped nothing)
		if k < len(s.shares) {
			share = s.shares[k]
		}
		c.Parts = append(c.Parts, CeilingPart{Source: names[k], GBps: o.GBps, Share: share})
		if secs >= 0 && o.GBps > 0 {
			secs += share / o.GBps
		} else {
			secs = -1 // a source not measured
		}
	}
	c.GBps, c.OutputGBps, c.PerOutput = 0, 0, 1
	if secs > 0 {
		c.GBps = 1 / secs
		c.OutputGBps = c.GBps
	}
	return c
}

// sourceNames is the names of the run's sources, in order.
func sourceNames(bs *boxSet) []string {
	var out []string
	for _, src := range bs.Sources {
		out = append(out, src.Name)
	}
	return out
}

// preadReplay reads the chunk byte ranges of the measured batches on the
// rig's IO pool (see damacy help bench). Its rate counts the bytes read;
// scale.preadReplay turns it into output bytes.
func preadReplay(ctx context.Context, bs *boxSet, rg *rig, rp *replanned, o Options, tr *tracer) (Ceiling, error) {
	if o.DropCache {
		if err := dropDatasetCache(bs.DatasetDir); err != nil {
			return Ceiling{}, err
		}
	}
	ranges := replayRanges(rp)
	buf, offs := replayStage(ranges)
	t := time.Now()
	n, err := rg.preadAll(ctx, ranges, buf, offs)
	el := time.Since(t)
	tr.span(traceRowPhases, "ceiling", "pread replay", t, t.Add(el), map[string]any{"ranges": len(ranges), "bytes": n})
	if err != nil {
		return Ceiling{}, err
	}
	c := Ceiling{Name: "pread replay", Of: "read", Detail: fmt.Sprintf("%d threads, %d ranges, %s per range", rg.io.Size(), len(ranges), base.FormatBytes(n/int64(max(len(ranges), 1)))), Bytes: n, Time: el, Limits: true}
	c.GBps = float64(n) / el.Seconds() / 1e9
	return c, nil
}

// decodeSample is the stored chunks of the first measured batches, up to
// decodeSampleBytes, loaded into memory for the decode-only ceilings.
type decodeSample struct {
	refs    []chunkRef
	src     []byte  // the stored bytes, chunk after chunk
	offs    []int64 // where chunk i starts in src
	stored  int64
	decoded int64
}

func loadDecodeSample(ctx context.Context, rg *rig, rp *replanned) (*decodeSample, error) {
	ds := new(decodeSample)
	for _, b := range rp.batches {
		for _, r := range b {
			ds.refs = append(ds.refs, r)
			ds.stored += r.chunk.Length
			ds.decoded += int64(r.decodedBytes())
		}
		if ds.stored >= decodeSampleBytes {
			break
		}
	}
	if len(ds.refs) == 0 {
		return nil, errors.New("no stored chunks in the boxes")
	}
	var err error
	ds.src, ds.offs, err = rg.loadChunks(ctx, ds.refs)
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// stored returns chunk i's stored bytes.
func (ds *decodeSample) chunk(i int) []byte {
	return ds.src[ds.offs[i] : ds.offs[i]+ds.refs[i].chunk.Length]
}

// decodeOnly decodes the sample on the rig's CPU pool (one decoder per
// core), repeating the pass until minCeilingTime has passed.
func decodeOnly(ctx context.Context, rg *rig, ds *decodeSample) (Ceiling, error) {
	refs := ds.refs
	pass := func() error {
		return rg.decode(ctx, len(refs), func(d *decoder, i int) error {
			r := &refs[i]
			n := r.decodedBytes()
			if len(d.dst) < n {
				d.dst = make([]byte, n)
			}
			return d.Decode(d.dst[:n], &r.chunk, ds.chunk(i))
		})
	}
	el, reps, err := timeRepeated(pass)
	if err != nil {
		return Ceiling{}, err
	}
	total := ds.decoded * int64(reps)
	return Ceiling{
		Name: "decode-only (cpu)", Of: "decoded", Detail: fmt.Sprintf("%d workers, %d chunks, %s stored", rg.cpu.Size(), len(refs), base.FormatBytes(ds.stored)),
		Bytes: total, Time: el, GBps: float64(total) / el.Seconds() / 1e9,
	}, nil
}

// timeRepeated runs f until minCeilingTime has passed (at most
// maxCeilingRepeats times) and returns the time and the repetitions.
func timeRepeated(f func() error) (time.Duration, int, error) {
	t := time.Now()
	reps := 0
	for reps < maxCeilingRepeats && (reps == 0 || time.Since(t) < minCeilingTime) {
		if err := f(); err != nil {
			return 0, 0, err
		}
		reps++
	}
	return time.Since(t), reps, nil
}

// assembleBench is one batch's assemble work: decoded chunks in an arena
// and the ops that gather them into a batch.
type assembleBench struct {
	plan  *ptx.Plan
	arena []byte
}

// prepareAssembles prepares assemble-only's batches: one per source.
// transforms holds, per source, the first measured batch's transforms
// (nil entries: none).
func prepareAssembles(ctx context.Context, rg *rig, rp *replanned, bs *boxSet, transforms [][]pipeline.Transform) ([]*assembleBench, error) {
	var out []*assembleBench
	for k := range bs.Sources {
		var xf []pipeline.Transform
		if k < len(transforms) {
			xf = transforms[k]
		}
		ab, err := prepareAssemble(ctx, rg, rp, bs, k, xf)
		if err != nil {
			if len(bs.Sources) > 1 {
				err = fmt.Errorf("source %q: %w", bs.Sources[k].Name, err)
			}
			return nil, err
		}
		out = append(out, ab)
	}
	return out, nil
}

// prepareAssemble decodes the chunks of source k of the first measured
// batch's first samples (up to assembleArenaBytes) into an arena and
// plans their assembly as the engines do (plan.AddOp), each sample with
// its transform from transforms (nil: none).
func prepareAssemble(ctx context.Context, rg *rig, rp *replanned, bs *boxSet, k int, transforms []pipeline.Transform) (*assembleBench, error) {
	dt, _ := pipeline.ParseDtype(bs.Sources[k].Dtype)
	outType := dt.Kernel()
	// Choose the samples and lay their distinct chunks out in the arena:
	// the jobs of a batch come in the order its samples first need them.
	zb := rp.first[k]
	at := make([]int64, len(zb.Jobs))
	var arena int64
	samples, jobs := 0, 0
	for samples < len(bs.measuredBatch(0)) { // a ragged batch (run.boxes chunks) has fewer
		end, add := jobs, int64(0)
		for ; end < len(zb.Jobs) && zb.Jobs[end].Sample == samples; end++ {
			add += alignUp(int64(zb.Jobs[end].Chunk.Codec.Layout().Bytes()), 64)
		}
		if samples > 0 && arena+add > assembleArenaBytes {
			break
		}
		for ; jobs < end; jobs++ {
			at[jobs] = arena
			arena += alignUp(int64(zb.Jobs[jobs].Chunk.Codec.Layout().Bytes()), 64)
		}
		samples++
	}
	var shape []int
	for _, a := range bs.Sources[k].Axes {
		shape = append(shape, int(bs.SampleShape[a]))
	}
	p, err := ptx.NewPlan(ptx.Layout{Samples: samples, Shape: shape, Dtype: outType})
	if err != nil {
		return nil, err
	}
	for n := range min(samples, len(transforms)) {
		if err := p.SetTransform(n, transforms[n].Kernel()); err != nil {
			return nil, err
		}
	}
	first := bs.Samples[bs.Warmup*bs.BatchSize:]
	arrays := rp.arrays[k]
	for i := range zb.Copies {
		c := &zb.Copies[i]
		if c.Sample >= samples { // copies come sample after sample
			break
		}
		a := arrays[first[c.Sample].Array]
		sdt, ok := plan.Dtype(a.DataType())
		if !ok {
			return nil, fmt.Errorf("no kernel type for %v", a.DataType())
		}
		var src *ptx.Source
		if c.Job >= 0 {
			s := plan.Source(sdt, zb.Jobs[c.Job].Chunk.Codec.Layout())
			s.Offset = at[c.Job]
			src = &s
		}
		fill, err := ptx.FillFor(outType, sdt, plan.FillValue(a.FillValue()))
		if err != nil {
			return nil, err
		}
		if _, err := plan.AddOp(p, c, src, fill); err != nil {
			return nil, err
		}
	}
	// Decode the chunks into the arena.
	refs := make([]chunkRef, jobs)
	for i := range refs {
		refs[i].chunk = zb.Jobs[i].Chunk
		if refs[i].file, err = file(arrays[zb.Jobs[i].Array], zb.Jobs[i].Chunk.Key); err != nil {
			return nil, err
		}
	}
	src, offs, err := rg.loadChunks(ctx, refs)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, max(arena, p.SourceEnd()))
	err = rg.decode(ctx, len(refs), func(d *decoder, i int) error {
		r := &refs[i]
		return d.Decode(buf[at[i]:at[i]+int64(r.decodedBytes())], &r.chunk, src[offs[i]:offs[i]+r.chunk.Length])
	})
	if err != nil {
		return nil, err
	}
	return &assembleBench{plan: p, arena: buf}, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// assembleOnlyCPU times ptx.AssembleHost, the host engine's assemble, over
// one batch with one worker per CPU.
func assembleOnlyCPU(ab *assembleBench) Ceiling {
	l := ab.plan.Layout()
	out := make([]byte, l.Bytes())
	workers := runtime.GOMAXPROCS(0)
	var aerr error
	el, reps, err := timeRepeated(func() error {
		aerr = ptx.AssembleHost(out, l, ab.arena, ab.plan.Ops(), ab.plan.Transforms(), workers)
		return aerr
	})
	if err != nil {
		return Ceiling{Name: "assemble-only (cpu)", Note: err.Error()}
	}
	total := l.Bytes() * int64(reps)
	g := float64(total) / el.Seconds() / 1e9
	return Ceiling{
		Name: "assemble-only (cpu)", Of: "output", Detail: fmt.Sprintf("%d workers, %d samples, %d ops", workers, l.Samples, len(ab.plan.Ops())),
		Bytes: total, Time: el, GBps: g, OutputGBps: g, PerOutput: 1,
	}
}
