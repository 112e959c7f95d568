package bench

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/pipeline"
)

// epochs is how many times the run reads its measured boxes.
func (r *RunSpec) epochs() int { return max(r.Epochs, 1) }

// epochSeedStream separates the epochs' orders from the boxes' draw.
const epochSeedStream = 0x6461_6d61_6379_0002

// sequence yields the run's samples in push order: the warm-up boxes, then
// the measured boxes epoch after epoch, each epoch after the first in
// another order drawn from the run's seed. endless (--duration) never
// ends: a scenario of several epochs goes on with more of them, one of a
// single epoch goes on with new boxes drawn from the seed past its own.
func (bs *boxSet) sequence(sc *Scenario, endless bool) iter.Seq[pipeline.Sample] {
	return func(yield func(pipeline.Sample) bool) {
		warm := bs.Warmup * bs.BatchSize
		for _, s := range bs.Samples[:warm] {
			if !yield(bs.sample(s)) {
				return
			}
		}
		measured := bs.Samples[warm:]
		for _, s := range measured {
			if !yield(bs.sample(s)) {
				return
			}
		}
		if endless && sc.Run.epochs() == 1 {
			next := bs.stream()
			for range bs.Samples {
				next()
			}
			for {
				s, _ := next()
				if !yield(bs.sample(s)) {
					return
				}
			}
		}
		shuffle := rand.New(rand.NewPCG(sc.Run.Seed, epochSeedStream))
		for e := 1; endless || e < sc.Run.epochs(); e++ {
			for _, i := range shuffle.Perm(len(measured)) {
				if !yield(bs.sample(measured[i])) {
					return
				}
			}
		}
	}
}

// EpochsReport gives the rate of each pass over the measured boxes, for a
// run of several epochs: the first reads and decodes what a chunk cache
// then holds for the others.
type EpochsReport struct {
	Each         []EpochReport `json:"each"`
	FirstGBps    float64       `json:"first_gbps"`     // output GB/s of epoch 1
	LaterGBps    float64       `json:"later_gbps"`     // output GB/s of epochs 2..n together
	FirstHitRate float64       `json:"first_hit_rate"` // chunk cache hits / lookups in epoch 1
	LaterHitRate float64       `json:"later_hit_rate"` // and in epochs 2..n
}

// EpochReport is one epoch. Its counters are the pipeline's between the
// pops that end this epoch and the one before, so they include the work
// of the lookahead batches planned and read in the meantime.
type EpochReport struct {
	Epoch         int           `json:"epoch"`
	Batches       int           `json:"batches"`
	Wall          time.Duration `json:"wall_ns"` // from the end of the epoch before (the measured start) to its last pop
	OutputGBps    float64       `json:"output_gbps"`
	SamplesPerS   float64       `json:"samples_per_s"`
	CacheHits     int64         `json:"chunk_cache_hits"`
	CacheMisses   int64         `json:"chunk_cache_misses"`
	ChunksDecoded int64         `json:"chunks_decoded"`
	BytesRead     int64         `json:"bytes_read"`
	outputBytes   int64
}

// measure follows the measured batches as they are popped: their boxes'
// bytes, the epochs (run.epochs > 1) and, with --duration, the memory and
// throughput samples.
type measure struct {
	bs      *boxSet
	start   time.Time
	batches int
	box     int64
	sources []SourceReport // each tensor's bytes and a sample's shape

	perEpoch  int // batches per epoch; 0: one epoch, not reported
	lastEnd   time.Time
	lastStats pipeline.Stats
	epochs    []EpochReport

	soak *sampler
}

// newMeasure starts following the measured batches at start, right after
// the stats reset.
func newMeasure(p *pipeline.Pipeline, sc *Scenario, bs *boxSet, start time.Time, o Options, device string) *measure {
	m := &measure{bs: bs, start: start, lastEnd: start}
	if sc.Run.epochs() > 1 {
		m.perEpoch = sc.Run.Batches
	}
	if o.Duration > 0 {
		m.soak = startSampler(p, device, start)
	}
	return m
}

// popped counts batch b, popped at t.
func (m *measure) popped(p *pipeline.Pipeline, b *pipeline.Batch, t time.Time) {
	m.batches++
	m.box += m.bs.boxBytes(b.Samples())
	for k, t := range b.Tensors() {
		info := t.Info()
		n := int64(info.Dtype.Size())
		for _, x := range info.Shape {
			n *= x
		}
		if k == len(m.sources) {
			m.sources = append(m.sources, SourceReport{Name: t.Name(), Path: m.bs.Sources[k].Path, Dtype: info.Dtype.String(), Shape: info.Shape[1:]})
		}
		m.sources[k].OutputBytes += n
	}
	if m.perEpoch == 0 || m.batches%m.perEpoch != 0 {
		return
	}
	st := p.Stats()
	prev := &m.lastStats
	e := EpochReport{
		Epoch: len(m.epochs) + 1, Batches: m.perEpoch, Wall: t.Sub(m.lastEnd),
		CacheHits: st.ChunkCacheHits - prev.ChunkCacheHits, CacheMisses: st.ChunkCacheMisses - prev.ChunkCacheMisses,
		ChunksDecoded: st.ChunksDecoded - prev.ChunksDecoded, BytesRead: st.BytesRead - prev.BytesRead,
		outputBytes: st.OutputBytes - prev.OutputBytes,
	}
	if s := e.Wall.Seconds(); s > 0 {
		e.OutputGBps = float64(e.outputBytes) / s / 1e9
		e.SamplesPerS = float64(st.SamplesEmitted-prev.SamplesEmitted) / s
	}
	m.epochs = append(m.epochs, e)
	m.lastEnd, m.lastStats = t, st
}

// finish stops the sampling and fills rep's measured-batch fields.
func (m *measure) finish(rep *Report) {
	rep.Batches = m.batches
	rep.boxBytes = m.box
	rep.Sources = m.sources
	for k := range rep.Sources {
		rep.Sources[k].OutputGBps = float64(rep.Sources[k].OutputBytes) / rep.Wall.Seconds() / 1e9
	}
	if m.soak != nil {
		rep.Soak = m.soak.finish()
	}
	if len(m.epochs) == 0 {
		return
	}
	er := &EpochsReport{Each: m.epochs}
	var out, hits, lookups int64
	var wall time.Duration
	for i, e := range m.epochs {
		if i == 0 {
			er.FirstGBps = e.OutputGBps
			er.FirstHitRate = base.Ratio(e.CacheHits, e.CacheHits+e.CacheMisses)
			continue
		}
		out += e.outputBytes
		wall += e.Wall
		hits += e.CacheHits
		lookups += e.CacheHits + e.CacheMisses
	}
	if wall > 0 {
		er.LaterGBps = float64(out) / wall.Seconds() / 1e9
	}
	er.LaterHitRate = base.Ratio(hits, lookups)
	rep.Epochs = er
}

// writeEpochs prints the epochs section of the text report.
func (r *Report) writeEpochs(p func(string, ...any)) {
	er := r.Epochs
	if er == nil {
		return
	}
	p("\n")
	later := fmt.Sprintf("epochs 2..%d %.3f GB/s", len(er.Each), er.LaterGBps)
	if len(er.Each) == 2 {
		later = fmt.Sprintf("epoch 2 %.3f GB/s", er.LaterGBps)
	}
	if er.FirstGBps > 0 {
		later += fmt.Sprintf(" (%.2fx epoch 1)", er.LaterGBps/er.FirstGBps)
	}
	p("epochs       epoch 1 %.3f GB/s, chunk cache hit rate %.0f%%; %s, hit rate %.0f%%\n", er.FirstGBps, 100*er.FirstHitRate, later, 100*er.LaterHitRate)
	p("%-6s %8s %10s %10s %10s %10s %10s %10s %12s\n", "epoch", "batches", "wall", "GB/s", "samples/s", "hits", "misses", "decoded", "read")
	for i, e := range er.Each {
		// A --duration run may have many: the first and the last few.
		if n := len(er.Each); n > 8 && i >= 3 && i < n-3 {
			if i == 3 {
				p("...\n")
			}
			continue
		}
		p("%-6d %8d %10s %10.3f %10.1f %10d %10d %10d %12s\n", e.Epoch, e.Batches, e.Wall.Round(time.Millisecond), e.OutputGBps, e.SamplesPerS,
			e.CacheHits, e.CacheMisses, e.ChunksDecoded, base.FormatBytes(e.BytesRead))
	}
}
