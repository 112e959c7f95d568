package pipeline

import (
	"errors"
	"slices"
	"strconv"

	"github.com/damacy-go/damacy/internal/cache"
)

// lane is one source's engine and its request and result queues. The
// batch goroutine sends every lane its share of each batch, in order; Pop
// takes one result from each.
type lane struct {
	src     Source
	eng     engine
	stats   *statsSink
	reqs    chan *batchReq
	results chan *result

	// A lane other than the primary: the source's sample shape, fixed by
	// the first batch (batch goroutine only), and its axis match per
	// primary array (also Check's).
	shape []int
	maps  *cache.LRU[string, axisMap]
}

func newLane(src Source, eng engine, stats *statsSink, cfg Config) *lane {
	// With several lanes the batch goroutine hands each batch to every
	// lane in turn: room for the lookahead keeps one lane's planner from
	// waiting while another has not taken its request yet (a planner
	// that finds no next request sends its held wave alone).
	queued := 1
	if len(cfg.Sources) > 1 {
		queued = cfg.LookaheadBatches
	}
	return &lane{
		src:     src,
		eng:     eng,
		stats:   stats,
		reqs:    make(chan *batchReq, queued),
		results: make(chan *result, cfg.LookaheadBatches),
		maps:    cache.NewLRU[string, axisMap](cfg.ZarrMetaCache, nil),
	}
}

// closeLanes closes every lane's engine, returning the errors joined.
func closeLanes(lanes []*lane) error {
	var errs []error
	for _, l := range lanes {
		errs = append(errs, l.eng.close())
	}
	return errors.Join(errs...)
}

// forSource returns the configuration of source i's engine.
func (c Config) forSource(i int) Config {
	s := c.Sources[i]
	c.Dtype = s.Dtype
	if s.HostBufferBytes > 0 {
		c.HostBufferBytes = s.HostBufferBytes
	}
	if s.DeviceBufferBytes > 0 {
		c.DeviceBufferBytes = s.DeviceBufferBytes
	}
	if n := len(c.Sources); n > 1 {
		c.MaxGPUMemoryBytes /= int64(n)
		c.Logger = c.Logger.With("source", s.Name)
	}
	if i > 0 {
		c.SampleShape = nil // fixed by the first batch (lane.shape)
	}
	return c
}

// sourceError says which source an error of a pipeline with several
// sources is about (an error that names one already stays as it is).
func sourceError(name string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Source != "" {
			return err
		}
		c := *e
		c.Op = "source " + strconv.Quote(name) + ": " + c.Op
		c.Source = name
		return &c
	}
	e = newError("source "+strconv.Quote(name), ErrInvalid, "", err)
	e.Source = name
	return e
}

// split returns the requests of a batch for every lane: the batch itself
// for the primary, and for each other source its samples as that source
// reads them. A sample that cannot be matched to a source fails the batch
// in every lane or, under OnErrorSkip, is left out of it (req.skipped). A
// batch with every sample left out still goes to the engines, failed with
// the first one's error, to come out of Pop empty.
func (p *Pipeline) split(req *batchReq) []*batchReq {
	out := make([]*batchReq, len(p.lanes))
	out[0] = req
	for i := 1; i < len(p.lanes); i++ {
		out[i] = &batchReq{id: req.id, flushAt: req.flushAt, err: req.err}
	}
	if req.err != nil {
		return out
	}
	if a := p.cfg.Augment; a != nil {
		req.xf = make([]Transform, len(req.samples))
		for n, s := range req.samples {
			req.xf[n] = a.draw(p.shape, s.Seed)
			if !p.intensity[0] {
				req.xf[n].noIntensity()
			}
		}
	}
	if len(p.lanes) > 1 {
		kept := &batchReq{samples: make([]Sample, 0, len(req.samples)), pos: make([]int64, 0, len(req.samples))}
		for i := 1; i < len(p.lanes); i++ {
			out[i].samples = make([]Sample, 0, len(req.samples))
		}
		for n, s := range req.samples {
			err := p.projectSample(req, n, out)
			if err != nil && (p.cfg.OnError != OnErrorSkip || !sampleFault(err)) {
				for _, r := range out {
					r.err = err
				}
				return out
			}
			if err != nil {
				req.skipped = append(req.skipped, err)
				continue
			}
			kept.samples, kept.pos = append(kept.samples, s), append(kept.pos, req.pos[n])
			if req.xf != nil {
				kept.xf = append(kept.xf, req.xf[n])
			}
		}
		req.samples, req.pos, req.xf = kept.samples, kept.pos, kept.xf
		for _, r := range out[1:] {
			r.pos = req.pos
		}
	}
	if len(req.samples) == 0 && len(req.skipped) > 0 {
		for _, r := range out {
			r.err = req.skipped[0]
		}
	}
	return out
}

// projectSample appends sample n of req, as each other source reads it
// (and its transform, with Config.Augment), to that source's request in
// out; on an error it appends nothing and returns it, naming the sample
// and the source.
func (p *Pipeline) projectSample(req *batchReq, n int, out []*batchReq) *Error {
	s := req.samples[n]
	ls := make([]Sample, len(p.lanes))
	xf := make([]Transform, len(p.lanes))
	for i := 1; i < len(p.lanes); i++ {
		l := p.lanes[i]
		smp, m, err := p.project(l, s)
		if err == nil && req.xf != nil {
			xf[i], err = req.xf[n].project(m, l.src.Name)
			if !p.intensity[i] {
				xf[i].noIntensity()
			}
		}
		if err != nil {
			return sourceError(l.src.Name, sampleError(req, n, err)).(*Error)
		}
		ls[i] = smp
	}
	for i := 1; i < len(p.lanes); i++ {
		out[i].samples = append(out[i].samples, ls[i])
		if req.xf != nil {
			out[i].xf = append(out[i].xf, xf[i])
		}
	}
	return nil
}

// project returns the sample a lane reads for a primary sample, fixing the
// lane's sample shape (and reserving its slots) at the first.
func (p *Pipeline) project(l *lane, s Sample) (Sample, axisMap, error) {
	uri := l.src.resolve(s.URI)
	m, err := p.matchSource(l, s)
	if err != nil {
		return Sample{}, nil, err
	}
	shape := m.shape(p.shape)
	if l.shape == nil {
		p.mu.Lock()
		err := l.eng.reserve(shape)
		p.mu.Unlock()
		if err != nil {
			return Sample{}, nil, err
		}
		l.shape = shape
	} else if !slices.Equal(shape, l.shape) {
		return Sample{}, nil, errorf("plan", ErrInvalid, uri, "the box gives this source shape %v, earlier samples gave it %v", shape, l.shape)
	}
	return Sample{URI: uri, Box: m.project(s.Box), Level: s.Level, Seed: s.Seed}, m, nil
}

// matchSource opens the primary array of s and lane l's array for it, and
// matches their axes (cached per primary array).
func (p *Pipeline) matchSource(l *lane, s Sample) (axisMap, error) {
	uri := l.src.resolve(s.URI)
	m, _, err := l.maps.Get(s.URI+"\x00"+strconv.Itoa(s.Level), func() (axisMap, error) {
		prim, err := p.axes.open(s.URI, s.Level)
		if err != nil {
			return nil, err
		}
		src, err := p.axes.open(uri, s.Level)
		if err != nil {
			return nil, err
		}
		return matchAxes(prim.names, src.names, prim.arr.Rank(), src.arr.Rank(), uri)
	})
	return m, err
}

// addEngine adds another engine's metrics, counters and memory gauges to s.
func (s *Stats) addEngine(o *Stats) {
	for _, m := range [...]struct{ to, from *Metric }{
		{&s.Plan, &o.Plan}, {&s.IO, &o.IO}, {&s.Check, &o.Check}, {&s.H2D, &o.H2D},
		{&s.Decompress, &o.Decompress}, {&s.Assemble, &o.Assemble},
	} {
		m.to.merge(m.from)
	}
	for _, c := range [...]struct{ to, from *int64 }{
		{&s.ZarrMetaHits, &o.ZarrMetaHits}, {&s.ZarrMetaMisses, &o.ZarrMetaMisses},
		{&s.ShardIndexHits, &o.ShardIndexHits}, {&s.ShardIndexMisses, &o.ShardIndexMisses},
		{&s.WavesEmitted, &o.WavesEmitted}, {&s.WavesShared, &o.WavesShared},
		{&s.GPUBytesCommitted, &o.GPUBytesCommitted},
		{&s.ChunkCacheHits, &o.ChunkCacheHits}, {&s.ChunkCacheMisses, &o.ChunkCacheMisses},
		{&s.ChunkCacheEvictions, &o.ChunkCacheEvictions}, {&s.ChunkCacheBytes, &o.ChunkCacheBytes},
		{&s.ChunksDecoded, &o.ChunksDecoded}, {&s.ChunksGPU, &o.ChunksGPU},
		{&s.ChunksRedecoded, &o.ChunksRedecoded}, {&s.ChunksFill, &o.ChunksFill},
		{&s.ChunksDeduped, &o.ChunksDeduped}, {&s.ReadOps, &o.ReadOps},
		{&s.BytesRead, &o.BytesRead}, {&s.BytesMapped, &o.BytesMapped},
		{&s.MappedFileBytes, &o.MappedFileBytes}, {&s.RemoteRequests, &o.RemoteRequests},
		{&s.RemoteRetries, &o.RemoteRetries}, {&s.BoxBytes, &o.BoxBytes},
	} {
		*c.to += *c.from
	}
}

// merge adds another stage's measurements to m.
func (m *Metric) merge(o *Metric) {
	if o.Count == 0 {
		return
	}
	m.Time += o.Time
	if m.Best == 0 || (o.Best != 0 && o.Best < m.Best) {
		m.Best = o.Best
	}
	m.InBytes += o.InBytes
	m.OutBytes += o.OutBytes
	m.Count += o.Count
}
