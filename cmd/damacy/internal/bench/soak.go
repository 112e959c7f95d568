package bench

import (
	"strings"
	"sync"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
)

// soakInterval is how often a --duration run samples.
const soakInterval = time.Second

// Growth is flagged when the average over the last window exceeds the
// first window's by more than growthFraction of it and growthBytes.
const (
	soakWindow     = time.Minute
	growthFraction = 0.05
	growthBytes    = 16 << 20
)

// SoakReport is what a --duration run sampled every second: the memory
// the pipeline and the process hold, and the throughput.
type SoakReport struct {
	Interval time.Duration `json:"interval_ns"`
	// Window is the stretch at each end whose averages the growth
	// compares: a minute, or a third of the run when it is shorter.
	Window       time.Duration `json:"window_ns"`
	Samples      []SoakSample  `json:"samples"`
	GPUCommitted *Series       `json:"gpu_committed,omitempty"` // Stats.GPUBytesCommitted (CUDA engine)
	GPUUsed      *Series       `json:"gpu_used,omitempty"`      // the device's used memory, all processes (cuMemGetInfo)
	RSS          *Series       `json:"rss,omitempty"`           // the process's own resident memory (anonymous and shared memory)
	RSSFiles     *Series       `json:"rss_files,omitempty"`     // its resident pages of mapped files
	OutputGBps   *Series       `json:"output_gbps"`             // per interval
	Limits       []SoakLimit   `json:"limits,omitempty"`
	Error        string        `json:"error,omitempty"` // why a series is missing
}

// SoakSample is one sample; T counts from the measured start.
type SoakSample struct {
	T            time.Duration `json:"t_ns"`
	Batches      int64         `json:"batches"`     // popped since the measured start
	OutputGBps   float64       `json:"output_gbps"` // over the interval ending at T
	GPUCommitted int64         `json:"gpu_committed,omitempty"`
	GPUUsed      int64         `json:"gpu_used,omitempty"`
	RSS          int64         `json:"rss,omitempty"`
	RSSFiles     int64         `json:"rss_files,omitempty"`
	ChunkCache   int64         `json:"chunk_cache_bytes,omitempty"`
}

// Series summarizes one sampled quantity.
type Series struct {
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Last     float64 `json:"last"`
	FirstAvg float64 `json:"first_window_avg"`
	LastAvg  float64 `json:"last_window_avg"`
	// Growing is set for a memory series whose last-window average
	// exceeds the first's by more than 5% and 16 MiB.
	Growing bool `json:"growing"`
}

// SoakLimit is a memory bound of the soak targets checked
// against the largest sample.
type SoakLimit struct {
	Name   string `json:"name"`
	Max    int64  `json:"max"`
	Limit  int64  `json:"limit"`
	Within bool   `json:"within"`
	Detail string `json:"detail"`
}

// sampler samples a running pipeline every soakInterval until finish.
type sampler struct {
	p       *pipeline.Pipeline
	start   time.Time
	ex      *cuda.Executor // on the run's GPU, for cuMemGetInfo; nil on the host engine
	stop    chan struct{}
	done    chan struct{}
	samples []SoakSample // the sampler's goroutine's until done
	errs    []string
	prevOut int64
	prevT   time.Duration

	finished sync.Once
	report   *SoakReport
}

// startSampler samples p from start on; device is the run's ("cuda:N" or
// "cpu").
func startSampler(p *pipeline.Pipeline, device string, start time.Time) *sampler {
	s := &sampler{p: p, start: start, stop: make(chan struct{}), done: make(chan struct{})}
	if strings.HasPrefix(device, "cuda") {
		ex, err := gpuExecutor(device)
		if err != nil {
			s.errs = append(s.errs, "gpu used: "+err.Error())
		} else {
			s.ex = ex
		}
	}
	s.sample()
	go s.run()
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	t := time.NewTicker(soakInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sample()
		case <-s.stop:
			s.sample()
			return
		}
	}
}

// sample takes one sample now.
func (s *sampler) sample() {
	st := s.p.Stats()
	now := time.Since(s.start)
	x := SoakSample{T: now, Batches: st.BatchesEmitted, GPUCommitted: st.GPUBytesCommitted, ChunkCache: st.ChunkCacheBytes}
	if dt := (now - s.prevT).Seconds(); dt > 0 && len(s.samples) > 0 {
		x.OutputGBps = float64(st.OutputBytes-s.prevOut) / dt / 1e9
	}
	s.prevOut, s.prevT = st.OutputBytes, now
	if own, files, err := processRSS(); err == nil {
		x.RSS, x.RSSFiles = own, files
	} else if len(s.samples) == 0 {
		s.errs = append(s.errs, "rss: "+err.Error())
	}
	if s.ex != nil {
		err := s.ex.Do(func() error {
			free, total, err := cuda.MemGetInfo()
			x.GPUUsed = int64(total - free)
			return err
		})
		if err != nil && len(s.samples) == 0 {
			s.errs = append(s.errs, "gpu used: "+err.Error())
		}
	}
	s.samples = append(s.samples, x)
}

// finish stops sampling and summarizes the samples; later calls return
// the same report.
func (s *sampler) finish() *SoakReport {
	s.finished.Do(func() {
		close(s.stop)
		<-s.done
		if s.ex != nil {
			s.ex.Close()
		}
		s.report = s.summarize()
	})
	return s.report
}

func (s *sampler) summarize() *SoakReport {
	r := &SoakReport{Interval: soakInterval, Samples: s.samples, Error: strings.Join(s.errs, "; ")}
	end := s.samples[len(s.samples)-1].T
	r.Window = min(soakWindow, end/3)
	series := func(samples []SoakSample, memory bool, v func(*SoakSample) float64) *Series {
		var sr Series
		var first, last []float64
		for i := range samples {
			x := &samples[i]
			f := v(x)
			if i == 0 || f < sr.Min {
				sr.Min = f
			}
			sr.Max = max(sr.Max, f)
			sr.Last = f
			if x.T <= samples[0].T+r.Window {
				first = append(first, f)
			}
			if x.T >= end-r.Window {
				last = append(last, f)
			}
		}
		sr.FirstAvg, sr.LastAvg = mean(first), mean(last)
		if memory {
			d := sr.LastAvg - sr.FirstAvg
			sr.Growing = d > growthFraction*sr.FirstAvg && d > growthBytes
		}
		return &sr
	}
	// The first sample's rate covers no interval, and the last one's (taken
	// when the run stops) may cover a few milliseconds, over which the
	// rate says nothing: a batch more or less makes it 0 or thousands of
	// GB/s. The series takes the rates of intervals of half a tick or more.
	var rates []SoakSample
	for i := 1; i < len(s.samples); i++ {
		if s.samples[i].T-s.samples[i-1].T >= soakInterval/2 {
			rates = append(rates, s.samples[i])
		}
	}
	if len(rates) > 0 {
		r.OutputGBps = series(rates, false, func(x *SoakSample) float64 { return x.OutputGBps })
	}
	if s.samples[0].GPUCommitted > 0 {
		r.GPUCommitted = series(s.samples, true, func(x *SoakSample) float64 { return float64(x.GPUCommitted) })
	}
	if s.samples[0].GPUUsed > 0 {
		r.GPUUsed = series(s.samples, true, func(x *SoakSample) float64 { return float64(x.GPUUsed) })
	}
	if s.samples[0].RSS > 0 {
		r.RSS = series(s.samples, true, func(x *SoakSample) float64 { return float64(x.RSS) })
		r.RSSFiles = series(s.samples, true, func(x *SoakSample) float64 { return float64(x.RSSFiles) })
	}
	return r
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// checkLimits adds the soak targets of the CUDA engine: GPU memory
// committed within run.config.max_gpu_memory_bytes, and the process's own resident memory
// within host_buffer_bytes (the pinned staging, each source's) plus 256 MiB
// (its pages of mapped files are the page cache, bounded by
// Config.MappedFileBytes).
func (r *SoakReport) checkLimits(sc *Scenario, engine string) {
	if engine != "cuda" {
		return
	}
	if r.GPUCommitted != nil && sc.Run.Config.MaxGPUMemoryBytes > 0 {
		m := int64(r.GPUCommitted.Max)
		r.Limits = append(r.Limits, SoakLimit{Name: "gpu committed", Max: m, Limit: int64(sc.Run.Config.MaxGPUMemoryBytes), Within: m <= int64(sc.Run.Config.MaxGPUMemoryBytes),
			Detail: "run.config.max_gpu_memory_bytes " + ByteSize(sc.Run.Config.MaxGPUMemoryBytes).String()})
	}
	if r.RSS != nil {
		var hb int64
		for _, src := range sc.sources() {
			switch {
			case src.host > 0:
				hb += src.host
			case sc.Run.Config.HostBufferBytes > 0:
				hb += int64(sc.Run.Config.HostBufferBytes)
			default:
				hb += pipeline.DefaultCUDAHostBufferBytes
			}
		}
		limit := hb + 256<<20
		m := int64(r.RSS.Max)
		r.Limits = append(r.Limits, SoakLimit{Name: "rss", Max: m, Limit: limit, Within: m <= limit,
			Detail: "host_buffer_bytes " + base.FormatBytes(hb) + " + 256 MiB"})
	}
}

// writeSoak prints the soak section of the text report.
func (r *Report) writeSoak(p func(string, ...any)) {
	s := r.Soak
	if s == nil {
		return
	}
	p("\n")
	p("soak         %d samples every %s over %s; growth compares the averages of the first and the last %s\n",
		len(s.Samples), s.Interval, r.Wall.Round(time.Second), s.Window.Round(time.Second))
	p("%-18s %12s %12s %12s %12s %12s\n", "", "min", "max", "last", "first avg", "last avg")
	mem := func(name string, sr *Series) {
		if sr == nil {
			return
		}
		b := func(f float64) string { return base.FormatBytes(int64(f)) }
		flag := "flat"
		if sr.Growing {
			flag = "GROWING"
		}
		p("%-18s %12s %12s %12s %12s %12s   %s\n", name, b(sr.Min), b(sr.Max), b(sr.Last), b(sr.FirstAvg), b(sr.LastAvg), flag)
	}
	mem("gpu committed", s.GPUCommitted)
	mem("gpu used (device)", s.GPUUsed)
	mem("rss (own)", s.RSS)
	mem("rss (files)", s.RSSFiles)
	if g := s.OutputGBps; g != nil {
		p("%-18s %12.3f %12.3f %12.3f %12.3f %12.3f   GB/s per %s\n", "output", g.Min, g.Max, g.Last, g.FirstAvg, g.LastAvg, s.Interval)
	}
	for _, l := range s.Limits {
		verdict := "within"
		if !l.Within {
			verdict = "OVER"
		}
		p("limit        %s max %s, limit %s (%s): %s\n", l.Name, base.FormatBytes(l.Max), base.FormatBytes(l.Limit), l.Detail, verdict)
	}
	if s.Error != "" {
		p("not sampled: %s\n", s.Error)
	}
}
