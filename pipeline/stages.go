package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/internal/work"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// stages is what the host and CUDA engines share: metadata, planning, IO
// and CPU decoding, and the plumbing that moves waves between stages.
type stages struct {
	cfg    Config
	stats  *statsSink
	meta   *metaCache
	fds    *fdCache
	io     *work.Pool
	cpu    *work.Pool
	gets   chan int           // GET lanes: a token per request in flight (Config.IOConcurrency), shared by the waves read at once
	decs   chan *zarr.Decoder // one per CPU worker
	lim    waveLimits
	chunks *chunkCache // nil: no chunk cache
	maps   *fileMaps   // local files read from their mappings (nil: none)
	split  cpuSplit    // how the CPU workers split large chunks into tasks
	shape  []int
	head   atomic.Int32 // stage of the oldest unfinished batch
	trace  tracer
}

// newStages sets up what both engines share, for cfg with ChunkCacheBytes
// resolved (Config.chunkCache; secondMiss: the default cache).
func newStages(cfg Config, stats *statsSink, secondMiss bool) (*stages, error) {
	s := &stages{
		cfg:   cfg,
		stats: stats,
		meta:  newMetaCache(cfg, stats),
		fds:   newFDCache(),
		decs:  make(chan *zarr.Decoder, cfg.ComputeThreads),
		trace: tracer(cfg.Trace),
		split: cpuSplit{min: cpuSplitBytes, part: cpuPartBytes},
	}
	for range cfg.ComputeThreads {
		d, err := zarr.NewDecoder(zarr.DecoderOptions{MaxChunkBytes: int(cfg.chunkLimit())})
		if err != nil {
			s.closeDecoders()
			return nil, newError("new", ErrInvalid, "", err)
		}
		s.decs <- d
	}
	s.io = work.NewPool(cfg.IOThreads)
	s.cpu = work.NewPool(cfg.ComputeThreads)
	s.gets = make(chan int, cfg.IOConcurrency)
	for i := range cfg.IOConcurrency {
		s.gets <- i
	}
	if cfg.ChunkCacheBytes > 0 {
		s.chunks = newChunkCache(cfg.ChunkCacheBytes, secondMiss, stats)
	}
	return s, nil
}

func (s *stages) closeDecoders() {
	for {
		select {
		case d := <-s.decs:
			d.Close()
		default:
			return
		}
	}
}

func (s *stages) close() {
	s.io.Stop()
	s.cpu.Stop()
	s.closeDecoders()
	s.fds.closeAll()
	s.meta.stores.Close()
}

func (s *stages) headStage() stage { return stage(s.head.Load()) }

// releaseAll unpins chunk cache entries of a batch that failed planning.
func (s *stages) releaseAll(hits []*cacheEntry) {
	for _, e := range hits {
		s.chunks.release(e)
	}
}

// releaseHits unpins the chunk cache entries a wave read, once it has
// been assembled (or has failed).
func (s *stages) releaseHits(w *wave) {
	if len(w.hits) == 0 {
		return
	}
	bp := w.batch.plan
	for _, ji := range w.hits {
		s.chunks.release(bp.jobs[ji].hit)
	}
}

// read runs a wave's read ops into slab.
func (s *stages) read(ctx context.Context, w *wave, reads []readOp, slab []byte) error {
	if hasRemote(reads) {
		return s.readRemote(ctx, w, reads, slab)
	}
	t := time.Now()
	n, err := s.preads(ctx, w, reads, slab)
	s.stats.update(func(st *Stats) {
		st.IO.add(time.Since(t), n, n)
		st.ReadOps += int64(len(reads))
		st.BytesRead += n
	})
	return err
}

// readPieceBytes is the most bytes one IO task preads: a larger read op
// (a raw chunk of 32 MiB) is split over the IO workers, as one task it
// would copy out of the page cache on one core while the others wait.
const readPieceBytes = 4 << 20

// readPiece is one IO task of preads: the bytes [at, at+n) of a read op.
type readPiece struct {
	r     *readOp
	at, n int64
}

// readPieces cuts the read ops into IO tasks of at most readPieceBytes.
func readPieces(reads []readOp) []readPiece {
	out := make([]readPiece, 0, len(reads))
	for i := range reads {
		r := &reads[i]
		for at := int64(0); at == 0 || at < r.length; at += readPieceBytes {
			out = append(out, readPiece{r: r, at: at, n: min(readPieceBytes, r.length-at)})
		}
	}
	return out
}

// preads runs local read ops into slab on the IO workers, a large one in
// pieces (readPieces), and returns the bytes they read.
func (s *stages) preads(ctx context.Context, w *wave, reads []readOp, slab []byte) (int64, error) {
	var n int64
	for _, r := range reads {
		n += r.length
	}
	pieces := readPieces(reads)
	return n, s.io.Run(ctx, len(pieces), func(i int) error {
		p := &pieces[i]
		at := p.r.slabOff + p.at
		return s.fds.readAt(p.r, slab[at:at+p.n], p.at)
	}, s.trace.workers("read", "io", w, n))
}

// decodeJob decodes job j's stored bytes into out on the calling
// goroutine. With bloscPayload (a blosc chunk's frame, past its checksums)
// it leaves the blosc shuffle in place for the gather to undo (j.psrc
// says how); otherwise it decodes the whole codec chain.
func (s *stages) decodeJob(j *job, stored, out, bloscPayload []byte) error {
	if bloscPayload != nil {
		n, err := blosc.DecodeNoUnshuffle(out, bloscPayload)
		if err == nil && n != len(out) {
			err = fmt.Errorf("blosc chunk of %d bytes, want %d", n, len(out))
		}
		return err
	}
	d := <-s.decs
	defer func() { s.decs <- d }()
	return d.Decode(out, &j.chunk, stored)
}

func decodeError(j *job, err error) error {
	kind := ErrDecode
	if errors.Is(err, zarr.ErrTooLarge) {
		kind = ErrBudget
	}
	return errorf("decode", kind, j.src.uri, "chunk %s at offset %d (%d bytes): %w", j.chunk.Key, j.chunk.Offset, j.chunk.Length, err).
		inChunk(j.src.rel(j.chunk.Key), j.chunk.Offset, j.chunk.Length)
}

// assemblePlan builds the ptx plan of a wave; off(j) is where the gather
// finds job j's decoded bytes. With added non-nil, it says for each copy
// which ops, [from, to) in p.Ops(), it became, and the copy's job (an
// index in the batch plan's jobs; -1 for a fill). It returns the number of
// output elements the plan writes.
func (s *stages) assemblePlan(p *ptx.Plan, w *wave, off func(*job) int64, added func(job, from, to int)) (int64, error) {
	bp := w.batch.plan
	p.Reset()
	if err := setTransforms(p, w.batch.req); err != nil {
		return 0, err
	}
	var fills, elems int64
	for _, ci := range w.copies {
		c := &bp.copies[ci]
		from := len(p.Ops())
		if c.Job < 0 {
			fills++
			n, err := plan.AddOp(p, c, nil, bp.fills[c.Sample])
			if err != nil {
				return 0, newError("assemble", ErrInvalid, "", err)
			}
			elems += n
		} else {
			j := bp.jobs[c.Job]
			src := j.psrc
			src.Offset = off(j)
			n, err := plan.AddOp(p, c, &src, 0)
			if err != nil {
				return 0, newError("assemble", ErrInvalid, j.src.uri, err)
			}
			elems += n
		}
		if added != nil {
			added(c.Job, from, len(p.Ops()))
		}
	}
	s.stats.update(func(st *Stats) { st.ChunksFill += fills })
	return elems, nil
}

// assemblePlanFor returns the assemble plan for a batch of n samples:
// the engine's full-size plan, or a new one for a ragged batch.
func assemblePlanFor(full *ptx.Plan, n int) (*ptx.Plan, error) {
	if full.Layout().Samples == n {
		return full, nil
	}
	l := full.Layout()
	l.Samples = n
	p, err := ptx.NewPlan(l)
	if err != nil {
		return nil, newError("assemble", ErrInvalid, "", err)
	}
	return p, nil
}

func toInt64s(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}
