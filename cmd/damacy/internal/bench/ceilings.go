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
	// could reach if this were the only limit.
	OutputGBps float64 `json:"output_gbps"`
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
	out := float64(st.OutputBytes)
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
		c, err = getReplay(ctx, rd, rg, reqs, st, tr)
	} else {
		if rg, err = newRig(ioThreads(sc), nil); err != nil {
			return nil, err
		}
		defer rg.close()
		c, err = preadReplay(ctx, bs, rg, rp, st, o, tr)
	}
	if err != nil {
		return nil, err
	}
	cs = append(cs, c)

	// decode-only, on the CPU and (CUDA engine with nvCOMP) on the GPU.
	// Both are scaled by the bytes the run decoded.
	decoded := st.Decompress.OutBytes
	if decoded == 0 {
		for _, refs := range rp.batches {
			for i := range refs {
				decoded += int64(refs[i].decodedBytes())
			}
		}
	}
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
			c.OutputGBps = c.GBps * out / float64(max(decoded, 1))
			c.Limits = st.ChunksGPU == 0
			if !c.Limits {
				c.Note = fmt.Sprintf("%d of %d chunks decoded on the GPU", st.ChunksGPU, st.ChunksDecoded)
			}
			cs = append(cs, c)
		}
	}
	if gpu && ds != nil && st.ChunksGPU > 0 {
		t = time.Now()
		c, err := nvcompDecodeOnly(rep.Device, ds, nvcompCallBytes(int64(sc.Run.DeviceBuffer)))
		tr.span(traceRowPhases, "ceiling", "decode-only (nvcomp)", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("decode-only (nvcomp): %w", err))
		} else {
			c.OutputGBps = c.GBps * out / float64(max(decoded, 1))
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
		c := sumCeilings(each)
		c.Limits = !gpu
		cs = append(cs, c)
		tr.span(traceRowPhases, "ceiling", "assemble-only (cpu)", t, time.Now(), nil)
	}
	if gpu {
		t = time.Now()
		gcs, err := gpuCeilings(rep.Device, st, abs)
		tr.span(traceRowPhases, "ceiling", "gpu ceilings", t, time.Now(), nil)
		if err != nil {
			errs = append(errs, err)
		}
		cs = append(cs, gcs...)
	}
	return cs, errors.Join(errs...)
}

// preadReplay reads the chunk byte ranges of the measured batches on the
// rig's IO pool (see damacy help bench).
func preadReplay(ctx context.Context, bs *boxSet, rg *rig, rp *replanned, st pipeline.Stats, o Options, tr *tracer) (Ceiling, error) {
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
	if n > 0 {
		var preads int64
		preads, c.Limits = preadShare(st, n)
		if !c.Limits {
			c.Detail += fmt.Sprintf("; the run copied %.0f%% of its bytes from mapped files", 100*base.Ratio(st.BytesMapped, st.BytesRead))
		}
		c.OutputGBps = c.GBps * float64(st.OutputBytes) / float64(preads)
	}
	return c, nil
}

// preadShare returns the bytes the pread replay's rate is scaled by to
// give output GB/s, and whether preads bound the run. The run needs
// BytesRead per OutputBytes; the replay reads only the chunks (n bytes),
// so the scale is what the run read by pread: all it read, less what the
// GPU copied straight from mapped files. A run that read (nearly)
// everything so is not bound by preads at all; its figure is then what
// the preads would have given had the run read everything by pread.
func preadShare(st pipeline.Stats, n int64) (int64, bool) {
	read := max(st.BytesRead, n)
	preads := read - st.BytesMapped
	if preads*100 < st.BytesRead {
		return read, false
	}
	return preads, true
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

// sumCeilings is the ceiling of several measurements made one after the
// other, one per source: their bytes over their time.
func sumCeilings(cs []Ceiling) Ceiling {
	if len(cs) == 1 {
		return cs[0]
	}
	c := cs[0]
	c.Detail = "per source: " + c.Detail
	for _, o := range cs[1:] {
		c.Bytes += o.Bytes
		c.Time += o.Time
		c.Detail += "; " + o.Detail
		if o.Note != "" {
			c.Note = strings.TrimPrefix(c.Note+"; "+o.Note, "; ")
		}
	}
	c.GBps = float64(c.Bytes) / c.Time.Seconds() / 1e9
	c.OutputGBps = c.GBps
	return c
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
		Bytes: total, Time: el, GBps: g, OutputGBps: g,
	}
}
