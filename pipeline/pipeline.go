package pipeline

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/zarr"
)

// Range is a half-open interval [Start, Stop) of voxel indices along one
// axis. It is zarr.Range under the name this package's API uses, so a
// sample's box goes to the zarr planner as it is.
type Range = zarr.Range

// Sample is one box to read: an array (or OME-NGFF group) and a box in its
// level-0 (or Level) voxel grid, in the array's stored axis order. The box
// may reach outside the array; the outside reads as the fill value.
type Sample struct {
	URI   string  // path of a zarr array or an OME-NGFF group
	Box   []Range // one range per axis; extents must equal Config.SampleShape
	Level int     // multiscale level when URI names an OME-NGFF group
	// Seed selects the sample's transform with Config.Augment; 0: the
	// sample's position in push order, counted from 1.
	Seed uint64
}

func (s Sample) String() string {
	b := make([]byte, 0, 64)
	b = append(b, s.URI...)
	b = append(b, '[')
	for i, r := range s.Box {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d:%d", r.Start, r.Stop)
	}
	b = append(b, ']')
	if s.Level != 0 {
		b = fmt.Appendf(b, "@level%d", s.Level)
	}
	return string(b)
}

// item is one entry of the intake queue: a sample, a flush marker, or an
// error standing in for a sample that a PushSeq sequence got wrong.
type item struct {
	s     Sample
	flush bool
	at    time.Time // when the flush was asked for
	err   *Error
}

// batchReq is one batch to produce: its samples in push order (for a
// source other than the primary, the samples as that source reads them).
type batchReq struct {
	id      int64
	samples []Sample
	pos     []int64     // each sample's position in the intake (Error.Position)
	flushAt time.Time   // non-zero for a batch that Flush cut short
	err     error       // a sample was rejected: the batch fails with this
	xf      []Transform // with Config.Augment: each sample's transform, as this source sees it
	// skipped are the samples OnErrorSkip left out as the batch was cut
	// (the primary source's request only); each took its place in the
	// batch's count.
	skipped []*Error
}

// taken is how many samples of the intake the batch took: those it holds
// and those left out.
func (r *batchReq) taken() int { return len(r.samples) + len(r.skipped) }

// position returns sample n's position in the intake (0 when unknown).
func (r *batchReq) position(n int) int64 {
	if n < len(r.pos) {
		return r.pos[n]
	}
	return 0
}

// result is what an engine hands back for a batchReq, in order.
type result struct {
	req  *batchReq
	slot *slot // nil when err != nil
	err  error
}

// Pipeline streams batches of boxes. Its methods are safe for concurrent use.
type Pipeline struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	eng    engine  // the primary source's engine (lanes[0].eng)
	lanes  []*lane // one per source, the primary first

	mu       sync.Mutex
	closed   bool
	shape    []int         // sample shape, fixed by Config or by the first sample
	queue    []item        // pushed, not yet in the lookahead
	seqs     []pulled      // pending PushSeq sequences, in order; only the feeder pulls and stops them
	wake     chan struct{} // feeder wake-up (capacity 1)
	inFlight atomic.Int64  // samples pushed and not yet delivered
	draining bool          // Shutdown stopped intake
	popped   chan struct{} // poked (capacity 1) whenever Pop delivers, for Shutdown

	lookahead chan item  // admitted samples
	popMu     sync.Mutex // one Pop at a time, so batches leave in order
	popped1   []*result  // under popMu: results of the next batch taken from the first lanes by a Pop that was interrupted
	// skipCauses (under popMu) are the causes of skipped samples logged
	// so far (logSkipped).
	skipCauses map[string]struct{}
	axes       *metaCache // opens arrays for matching the sources' axes (batch goroutine)
	intensity  []bool     // per source: Config.Augment's intensity transform applies
	wg         sync.WaitGroup

	stats *statsSink
}

// New validates cfg, chooses the engine, and reserves all memory the
// pipeline will use. When cfg.SampleShape is empty, the batch slots are
// reserved at the first Push instead.
func New(cfg Config) (*Pipeline, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var lanes []*lane
	for i, src := range cfg.Sources {
		stats := new(statsSink)
		eng, err := newEngine(cfg.forSource(i), stats)
		if err != nil {
			for _, l := range lanes {
				l.eng.close()
			}
			if len(cfg.Sources) > 1 {
				err = sourceError(src.Name, err)
			}
			return nil, err
		}
		lanes = append(lanes, newLane(src, eng, stats, cfg))
	}
	return startLanes(cfg, lanes)
}

// start runs a pipeline of one source on an engine; New chooses the
// engine, tests may supply their own.
func start(cfg Config, eng engine, stats *statsSink) (*Pipeline, error) {
	src := Source{Name: DefaultSourceName, Dtype: cfg.Dtype}
	cfg.Sources = []Source{src}
	return startLanes(cfg, []*lane{newLane(src, eng, stats, cfg)})
}

// startLanes runs a pipeline on one engine per source.
func startLanes(cfg Config, lanes []*lane) (*Pipeline, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pipeline{
		cfg:        cfg,
		ctx:        ctx,
		cancel:     cancel,
		eng:        lanes[0].eng,
		lanes:      lanes,
		stats:      lanes[0].stats,
		wake:       make(chan struct{}, 1),
		popped:     make(chan struct{}, 1),
		skipCauses: map[string]struct{}{},
		lookahead:  make(chan item, (cfg.LookaheadBatches+cfg.BatchSlots-1)*cfg.BatchSize),
	}
	if len(lanes) > 1 {
		p.axes = newMetaCache(cfg, new(statsSink))
	}
	if a := cfg.Augment; a != nil {
		p.intensity = make([]bool, len(lanes))
		for i, l := range lanes {
			p.intensity[i] = a.HasIntensity() && (slices.Contains(a.IntensitySources, l.src.Name) || (len(a.IntensitySources) == 0 && i == 0))
		}
	}
	if len(cfg.SampleShape) > 0 {
		if err := cfg.Augment.validateShape(cfg.SampleShape); err != nil {
			closeLanes(lanes)
			cancel()
			return nil, err
		}
		p.shape = cfg.SampleShape
		if err := lanes[0].eng.reserve(p.shape); err != nil {
			closeLanes(lanes)
			cancel()
			return nil, err
		}
	}
	p.wg.Add(1 + len(lanes))
	go p.feed()
	go p.batch()
	for _, l := range lanes {
		go func() {
			defer p.wg.Done()
			l.eng.run(ctx, l.reqs, l.results)
		}()
	}
	return p, nil
}

// Push queues samples. Each is checked (URI, rank, extents) here; on the
// first bad one Push returns an error naming it (its index in the call),
// the samples before it stay queued and those after it are not queued,
// under either Config.OnError. Push opens no array (Check does). Push
// never blocks: samples wait in an unbounded queue until the lookahead has
// room (see Pending).
func (p *Pipeline) Push(samples ...Sample) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.draining {
		return newError("push", ErrShutdown, "", nil)
	}
	for i, s := range samples {
		if err := p.checkLocked(s); err != nil {
			if len(samples) > 1 {
				err.Op = fmt.Sprintf("push (sample %d of %d)", i, len(samples))
			}
			p.notifyLocked()
			return err
		}
		p.queue = append(p.queue, item{s: cloneSample(s)})
		p.inFlight.Add(1)
	}
	p.notifyLocked()
	return nil
}

// PushSeq queues a sequence of samples that is pulled lazily, as the
// lookahead frees space, after everything pushed before it, on a goroutine
// of the pipeline (the sequence may block; it must not call the pipeline).
// A sample the sequence yields that fails the checks of Push ends the
// sequence, and its error is returned by the Pop of the batch it would
// have joined (under OnErrorSkip the sample is left out of that batch
// instead, and the sequence goes on). Close stops the sequence once its
// code returns.
func (p *Pipeline) PushSeq(seq iter.Seq[Sample]) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.draining {
		return newError("push", ErrShutdown, "", nil)
	}
	next, stop := iter.Pull(seq)
	p.seqs = append(p.seqs, pulled{next, stop})
	// Samples pushed before the sequence keep their place: the feeder
	// drains the queue first. A marker keeps later Push calls behind it.
	p.queue = append(p.queue, item{})
	p.notifyLocked()
	return nil
}

// Pending reports whether pushed samples (or a PushSeq sequence) have not
// yet all entered the lookahead.
func (p *Pipeline) Pending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0 || len(p.seqs) > 0
}

// Flush marks the end of what was pushed so far: the samples not yet in a
// batch come out as one ragged batch (shape[0] = samples left). A Flush
// with no such samples emits nothing.
func (p *Pipeline) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.draining {
		return newError("flush", ErrShutdown, "", nil)
	}
	p.queue = append(p.queue, item{flush: true, at: time.Now()})
	p.notifyLocked()
	return nil
}

// Pop returns the next batch, in push order, blocking until it is ready,
// ctx is done (ErrCanceled), or the pipeline is closed (ErrShutdown). A
// batch that failed (unreadable file, corrupt chunk, rejected sample) is
// returned as its error, naming the sample (see the package doc); the
// pipeline stays usable for the batches after it unless the error is
// ErrCUDA. Under Config.OnError's OnErrorSkip a batch whose samples
// failed comes out without them (Batch.Skipped), reading them again
// first.
func (p *Pipeline) Pop(ctx context.Context) (*Batch, error) {
	p.popMu.Lock()
	defer p.popMu.Unlock()
	if p.ctx.Err() != nil {
		return nil, newError("pop", ErrShutdown, "", nil)
	}
	start := time.Now()
	stage := p.eng.headStage()
	// One result from every lane, in order; an interrupted Pop keeps
	// what it took for the next.
	for len(p.popped1) < len(p.lanes) {
		select {
		case r := <-p.lanes[len(p.popped1)].results:
			p.popped1 = append(p.popped1, r)
		case <-ctx.Done():
			return nil, canceled("pop", ctx)
		case <-p.ctx.Done():
			return nil, newError("pop", ErrShutdown, "", nil)
		}
	}
	rs := p.popped1
	p.popped1 = nil
	req := rs[0].req
	taken := int64(req.taken())
	skipped := slices.Clone(req.skipped)
	err := p.batchError(rs)
	if err != nil && p.salvageable(rs, err) {
		var more []*Error
		if more, err = p.salvage(rs); err == nil {
			skipped = append(skipped, more...)
			req = rs[0].req
		}
	}
	sortSkipped(skipped)
	if err != nil {
		for _, ri := range rs {
			if ri.slot != nil {
				ri.slot.unref()
			}
		}
	}
	wait := time.Since(start)
	if p.cfg.Trace != nil {
		p.cfg.Trace(Span{Stage: "pop", Lane: "consumer", Batch: req.id, Wave: -1, Start: start, End: start.Add(wait)})
	}
	p.stats.mu.Lock()
	if stage == stageIO {
		p.stats.PopWaitIO.add(wait, 0, 0)
	} else {
		p.stats.PopWaitCompute.add(wait, 0, 0)
	}
	if !req.flushAt.IsZero() {
		p.stats.FlushWait.add(time.Since(req.flushAt), 0, 0)
	}
	if err == nil {
		p.stats.BatchesEmitted++
		p.stats.SamplesEmitted += int64(len(req.samples))
		p.stats.SamplesSkipped += int64(len(skipped))
		for _, ri := range rs {
			p.stats.OutputBytes += ri.slot.bytes(len(req.samples))
		}
		if len(req.samples) < p.cfg.BatchSize {
			p.stats.BatchesTruncated++
		}
	}
	p.stats.mu.Unlock()
	p.inFlight.Add(-taken)
	select {
	case p.popped <- struct{}{}:
	default:
	}
	if err != nil {
		return nil, err
	}
	p.logSkipped(skipped)
	b := newBatch(p, rs)
	b.skipped = skipped
	return b, nil
}

// Batches pops n batches (n < 0: until ctx is done or the pipeline closes),
// yielding each with nil, or a nil batch with the error that ended or
// interrupted the sequence. Batch errors do not end it; ctx and shutdown do.
func (p *Pipeline) Batches(ctx context.Context, n int) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		for i := 0; n < 0 || i < n; i++ {
			b, err := p.Pop(ctx)
			if !yield(b, err) {
				return
			}
			if err != nil && (ctx.Err() != nil || p.ctx.Err() != nil) {
				return
			}
		}
	}
}

// Close stops the pipeline at once: blocked calls return ErrShutdown,
// in-flight work is cancelled and waited for, and memory is freed once
// every batch handed out has been released. It is idempotent.
func (p *Pipeline) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.queue = nil
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	// Batches already finished but never popped give their slots back.
	p.popMu.Lock()
	done := p.popped1
	p.popped1 = nil
	p.popMu.Unlock()
	for _, l := range p.lanes {
		for drained := false; !drained; {
			select {
			case r := <-l.results:
				done = append(done, r)
			default:
				drained = true
			}
		}
	}
	for _, r := range done {
		if r.slot != nil {
			r.slot.unref()
		}
	}
	return closeLanes(p.lanes)
}

// Shutdown stops intake (Push, PushSeq and Flush then return ErrShutdown),
// flushes what was pushed, and waits until every pushed sample has been
// delivered by Pop (which the caller keeps calling, from another
// goroutine), then closes the pipeline. If ctx ends first it returns an
// ErrCanceled error (wrapping ctx.Err()) and leaves the pipeline open:
// call Close to stop at once.
// Slots of batches still held are freed when they are released, as with
// Close.
func (p *Pipeline) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if !p.draining {
		p.queue = append(p.queue, item{flush: true, at: time.Now()})
		p.draining = true
		p.notifyLocked()
	}
	p.mu.Unlock()
	for p.inFlight.Load() > 0 {
		select {
		case <-p.popped:
		case <-ctx.Done():
			return canceled("shutdown", ctx)
		case <-p.ctx.Done():
			return nil // closed meanwhile
		}
	}
	return p.Close()
}

func (p *Pipeline) notifyLocked() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
