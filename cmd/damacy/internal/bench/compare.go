package bench

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/damacy-go/damacy/pipeline"
)

// CompareReport holds the comparisons a run measures (run.compare,
// --compare) after its measured batches, over its own boxes: each streams
// the run's warm-up batches, resets the statistics and times as many
// batches as the run measured.
type CompareReport struct {
	// NoAugment is the run's pipeline without augmentation (its
	// run.config.augment nil; with run.config.augment only).
	NoAugment *Comparison `json:"no_augment,omitempty"`
	// Apart is one pipeline per source, each reading its source alone
	// (apartConfigs), all at once, one batch popped from each in turn
	// (several run.config.sources only).
	Apart *Comparison `json:"apart,omitempty"`
}

// Comparison is one comparison's measurement.
type Comparison struct {
	Pipelines   int           `json:"pipelines"`
	Batches     int           `json:"batches"` // measured, of each pipeline
	Wall        time.Duration `json:"wall_ns"`
	OutputGBps  float64       `json:"output_gbps"` // every pipeline's output bytes / wall
	SamplesPerS float64       `json:"samples_per_s"`
	// Ratio is the run's throughput over this one's.
	Ratio float64 `json:"ratio"`
	// AugmentCostPct (NoAugment) is 100 * (1 - Ratio): the share of the
	// throughput the transforms cost.
	AugmentCostPct float64 `json:"augment_cost_pct,omitempty"`
	Verified       bool    `json:"verified,omitempty"` // batch 0 of each pipeline matched the reference reader
}

// Comparable reports whether the scenario has comparisons to measure:
// run.config.augment, or several run.config.sources.
func (sc *Scenario) Comparable() bool {
	return sc.Run.Config.Augment != nil || len(sc.Run.Config.Sources) > 1
}

// measureComparisons measures the comparisons that apply to the run, whose
// report rep holds its throughput and measured batches. With o.Verify,
// batch 0 of every pipeline is checked against the reference reader.
func measureComparisons(ctx context.Context, e Env, sc *Scenario, bs *boxSet, rep *Report, o Options) (*CompareReport, error) {
	cr := new(CompareReport)
	endless := o.Duration > 0
	first := bs.Samples[:sc.Run.Config.BatchSize]
	if sc.Run.Config.Augment != nil {
		cfg := pipelineConfig(sc)
		cfg.Augment, cfg.Logger = nil, e.Logger
		bs.remote.route(&cfg)
		var check func(int, *pipeline.Batch) error
		if o.Verify {
			check = func(_ int, b *pipeline.Batch) error { return verifyBatch(b, bs, first) }
		}
		c, err := lockstep(ctx, e, "without augment", []pipeline.Config{cfg}, []iter.Seq[pipeline.Sample]{bs.sequence(sc, endless)}, sc, rep.Batches, check, bs, o)
		if err != nil {
			return nil, fmt.Errorf("without augment: %w", err)
		}
		c.AugmentCostPct = 100 * (1 - c.setRatio(rep))
		cr.NoAugment = c
	}
	if len(bs.Sources) > 1 {
		cfgs := apartConfigs(sc)
		seqs := make([]iter.Seq[pipeline.Sample], len(cfgs))
		for k := range cfgs {
			cfgs[k].Logger = e.Logger
			bs.remote.route(&cfgs[k])
			seqs[k] = func(yield func(pipeline.Sample) bool) {
				for s := range bs.sequence(sc, endless) {
					if !yield(bs.project(k, s)) {
						return
					}
				}
			}
		}
		var check func(int, *pipeline.Batch) error
		if o.Verify {
			check = func(k int, b *pipeline.Batch) error { return verifyTensor(b.Tensors()[0], k, bs, first) }
		}
		c, err := lockstep(ctx, e, "one pipeline per source", cfgs, seqs, sc, rep.Batches, check, bs, o)
		if err != nil {
			return nil, fmt.Errorf("one pipeline per source: %w", err)
		}
		c.setRatio(rep)
		cr.Apart = c
	}
	return cr, nil
}

// setRatio sets and returns c.Ratio: the run's throughput over c's.
func (c *Comparison) setRatio(rep *Report) float64 {
	c.Ratio = rep.OutputGBps / c.OutputGBps
	return c.Ratio
}

// lockstep streams seqs[k] through a pipeline of cfgs[k], every pipeline
// at once, popping one batch from each in turn, holding them as the run
// holds its batches (run.hold_ms, run.keep): the warm-up batches, a stats
// reset, then batches measured. check, when set, is given each
// pipeline's batch 0.
func lockstep(ctx context.Context, e Env, what string, cfgs []pipeline.Config, seqs []iter.Seq[pipeline.Sample], sc *Scenario, batches int,
	check func(k int, b *pipeline.Batch) error, bs *boxSet, o Options) (*Comparison, error) {
	if o.DropCache {
		if err := dropDatasetCache(bs.DatasetDir); err != nil {
			return nil, err
		}
	}
	var ps []*pipeline.Pipeline
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	for k, cfg := range cfgs {
		p, err := pipeline.New(cfg)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
		if err := p.PushSeq(seqs[k]); err != nil {
			return nil, err
		}
	}
	kept := make([]*pipeline.Batch, len(ps)) // run.keep: each pipeline's batch popped last
	got := make([]*pipeline.Batch, len(ps))
	release := func(bb []*pipeline.Batch) {
		for k, b := range bb {
			if b != nil {
				b.Release()
				bb[k] = nil
			}
		}
	}
	defer release(kept)
	defer release(got)
	hold := time.Duration(sc.Run.HoldMS) * time.Millisecond
	total := sc.Run.Warmup + batches
	prog := startProgress(e, "comparing "+what, "batches", int64(total))
	defer prog.finish()
	var start time.Time
	for i := range total {
		if i == sc.Run.Warmup {
			for _, p := range ps {
				p.StatsReset()
			}
			start = time.Now()
		}
		for k, p := range ps {
			b, err := p.Pop(ctx)
			if err != nil {
				return nil, fmt.Errorf("pipeline %d, batch %d: %w", k, i, err)
			}
			got[k] = b
		}
		if i == 0 && check != nil {
			for k, b := range got {
				if err := check(k, b); err != nil {
					return nil, fmt.Errorf("verify: %w", err)
				}
			}
		}
		if hold > 0 {
			select {
			case <-time.After(hold):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if sc.Run.Keep {
			release(kept)
			copy(kept, got)
			clear(got)
		} else {
			release(got)
		}
		prog.add(1)
	}
	c := &Comparison{Pipelines: len(ps), Batches: batches, Wall: time.Since(start), Verified: check != nil}
	var out int64
	for _, p := range ps {
		out += p.Stats().OutputBytes
	}
	c.OutputGBps = float64(out) / c.Wall.Seconds() / 1e9
	c.SamplesPerS = float64(ps[0].Stats().SamplesEmitted) / c.Wall.Seconds()
	return c, nil
}

// writeCompare prints the comparisons section of the text report.
func (r *Report) writeCompare(p func(string, ...any)) {
	cr := r.Compare
	if cr == nil {
		return
	}
	p("\n")
	for _, c := range []*Comparison{cr.NoAugment, cr.Apart} {
		if c == nil {
			continue
		}
		p("compare      %d batches after %d warm-up, the run's boxes\n", c.Batches, r.Warmup)
		break
	}
	if c := cr.NoAugment; c != nil {
		p("  without augment         %.3f GB/s (%.1f samples/s): augmentation costs %.1f%% of the throughput\n", c.OutputGBps, c.SamplesPerS, c.AugmentCostPct)
	}
	if c := cr.Apart; c != nil {
		p("  one pipeline per source %.3f GB/s (%.1f samples/s), %d pipelines in lockstep: one pipeline reads %.2fx as fast\n", c.OutputGBps, c.SamplesPerS, c.Pipelines, c.Ratio)
	}
}
