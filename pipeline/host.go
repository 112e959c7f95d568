package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/pipeline/plan"
	"github.com/damacy-go/damacy/pipeline/work"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// hostSlabs is the number of staging slabs: one filling, one being decoded,
// one spare so IO never waits on compute for a whole wave.
const hostSlabs = 3

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

func newStages(cfg Config, stats *statsSink) (*stages, error) {
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
		s.chunks = newChunkCache(cfg.ChunkCacheBytes, stats)
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

// preads runs local read ops into slab on the IO workers and returns the
// bytes they read.
func (s *stages) preads(ctx context.Context, w *wave, reads []readOp, slab []byte) (int64, error) {
	var n int64
	for _, r := range reads {
		n += r.length
	}
	return n, s.io.Run(ctx, len(reads), func(i int) error {
		r := &reads[i]
		return s.fds.read(r, slab[r.slabOff:r.slabOff+r.length])
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

// planFor returns the assemble plan for a batch of n samples: the engine's
// full-size plan, or a new one for a ragged batch.
func planFor(full *ptx.Plan, n int) (*ptx.Plan, error) {
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

// hostEngine assembles batches in host memory, decoding on the CPU. It is
// the CPU fallback and the oracle the CUDA engine is tested against.
type hostEngine struct {
	*stages
	pool  *slotPool
	slabs chan []byte
	arena []byte         // the decoded chunks of the wave being assembled, then the chunk cache's region
	pin   runtime.Pinner // keeps slot memory where DLPack consumers may see it
	full  *ptx.Plan      // the assemble plan of a full batch, made by reserve
	// workers holds one hostWorker per CPU worker, borrowed by compute's
	// tasks.
	workers chan *hostWorker
}

func newHostEngine(cfg Config, stats *statsSink) (*hostEngine, error) {
	cfg = cfg.withBuffers(false)
	st, err := newStages(cfg, stats)
	if err != nil {
		return nil, err
	}
	slab := cfg.HostBufferBytes / hostSlabs &^ 255
	st.lim = waveLimits{slab: slab, arena: cfg.DeviceBufferBytes &^ 255, jobs: 1 << 16, readCap: min(4<<20, slab), readGap: 64 << 10,
		slabs: hostSlabs, arenas: 1, hostBytes: cfg.HostBufferBytes, deviceBytes: cfg.DeviceBufferBytes}
	if need := align(cfg.MaxChunkBytes); st.lim.arena < need {
		st.close()
		return nil, errorf("new", ErrBudget, "", "Config.DeviceBufferBytes = %d cannot hold one chunk of Config.MaxChunkBytes = %d: raise Config.DeviceBufferBytes to at least %d, or lower Config.MaxChunkBytes (0: any chunk the buffers hold)", cfg.DeviceBufferBytes, cfg.MaxChunkBytes, need)
	}
	stats.update(func(s *Stats) { s.Engine, s.Decoder = "host", "cpu" })
	cfg.Logger.Info("damacy: host engine: batches in host memory, chunks decoded on the CPU", "workers", cfg.ComputeThreads)
	if budget := mappedFileBudget(cfg.MappedFileBytes); budget > 0 {
		st.maps = newFileMaps(0, budget)
	}
	workers := make(chan *hostWorker, cfg.ComputeThreads)
	for range cfg.ComputeThreads {
		workers <- newHostWorker()
	}
	return &hostEngine{stages: st, workers: workers}, nil
}

func (h *hostEngine) reserve(shape []int) error {
	h.shape = shape
	l := ptx.Layout{Samples: h.cfg.BatchSize, Shape: shape, Dtype: h.cfg.Dtype.Kernel()}
	if err := l.Validate(); err != nil {
		return newError("new", ErrInvalid, "", err)
	}
	full, err := ptx.NewPlan(l)
	if err != nil {
		return newError("new", ErrInvalid, "", err)
	}
	h.full = full
	bytes := l.Bytes()
	slots := make([]*slot, h.cfg.BatchSlots)
	for i := range slots {
		// Shared memory (a memfd), so that Batch.Share can hand a slot to
		// another process.
		buf, fd, err := sharedMem("damacy-batch-slot", bytes)
		if err != nil {
			for _, s := range slots[:i] {
				freeSharedMem(s.host, s.share.fd)
			}
			return newError("new", ErrOutOfMemory, "", err)
		}
		h.pin.Pin(&buf[0])
		slots[i] = &slot{index: i, shape: append([]int64{int64(h.cfg.BatchSize)}, toInt64s(shape)...), dtype: h.cfg.Dtype, host: buf, share: slotShare{fd: fd}}
	}
	h.pool = newSlotPool(slots)
	h.slabs = make(chan []byte, hostSlabs)
	for range hostSlabs {
		h.slabs <- make([]byte, h.lim.slab)
	}
	var cached int64
	if h.chunks != nil {
		cached = h.chunks.size
	}
	h.arena = make([]byte, h.lim.arena+cached)
	return nil
}

func toInt64s(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

func (h *hostEngine) slotsInUse() int64 {
	if h.pool == nil {
		return 0
	}
	return h.pool.inUse.Load()
}

func (h *hostEngine) close() error {
	h.stages.close()
	if h.maps != nil {
		h.maps.close() // run has returned: no wave reads them
	}
	if h.pool == nil {
		h.pin.Unpin()
		return nil
	}
	// Slots held by the consumer are unmapped when released.
	h.pool.close(func(s *slot) { freeSharedMem(s.host, s.share.fd) }, h.pin.Unpin)
	return nil
}

// run: plan -> read (IO workers, into one of hostSlabs slabs) -> decode +
// assemble, each stage its own goroutine, so IO of wave k+1 overlaps the
// decoding of wave k. What reserve sets up (the slot pool, the assemble
// plan) is read only once a wave has arrived: with Config.SampleShape
// empty, reserve runs at the first Push, after run has started.
func (h *hostEngine) run(ctx context.Context, reqs <-chan *batchReq, out chan<- *result) {
	planned := make(chan *wave, 4)
	read := make(chan *wave, hostSlabs-1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() {
		defer wg.Done()
		h.plan(ctx, reqs, planned, func(j *job) {
			j.slabCost, j.arenaCost = j.chunk.Length, int64(j.layout.Bytes())+zarr.DecodeSlack
		}, false)
	}()
	go func() {
		defer wg.Done()
		defer close(read)
		for w := range planned {
			reads := w.reads
			if w.batch.failed() == nil && len(reads) > 0 && h.maps != nil {
				var err error
				if reads, err = h.mapReads(w); err != nil {
					w.batch.fail(err)
				}
			}
			if w.batch.failed() == nil && len(reads) > 0 {
				select {
				case w.slabBuf = <-h.slabs:
				case <-ctx.Done():
					return
				}
				if err := h.read(ctx, w, reads, w.slabBuf); err != nil {
					w.batch.fail(err)
				} else if h.maps != nil {
					h.heatUp(reads)
				}
			}
			select {
			case read <- w:
			case <-ctx.Done():
				return
			}
		}
	}()
	// held is the batch whose waves are being assembled into the slot it
	// took, until emit hands the slot on: if run stops in between, the
	// slot goes back here.
	var held *batchState
	defer func() {
		if held != nil && held.slot != nil {
			held.slot.unref()
		}
	}()
	for {
		h.head.Store(int32(stageIO))
		var w *wave
		select {
		case w = <-read:
		case <-ctx.Done():
			return
		}
		if w == nil {
			return
		}
		h.head.Store(int32(stageCompute))
		bs := w.batch
		if err := bs.failed(); bs.slot == nil && (err == nil || bs.keepsSlot(err)) {
			s, err := h.pool.get(ctx)
			if err != nil {
				h.giveSlab(w)
				return
			}
			bs.slot = s
			held = bs
		}
		if bs.failed() == nil {
			if err := h.compute(ctx, w, h.full); err != nil {
				bs.fail(err)
			}
		}
		h.giveSlab(w)
		h.releaseMaps(w)
		h.releaseHits(w)
		if !w.last {
			continue
		}
		held = nil // emit hands the slot on, or gives it back
		if !bs.emit(ctx, out) {
			return
		}
	}
}

// writeSlot copies b to the start of slot s (salvager).
func (h *hostEngine) writeSlot(s *slot, b []byte) error {
	copy(s.host, b)
	return nil
}

func (h *hostEngine) giveSlab(w *wave) {
	if w.slabBuf != nil {
		h.slabs <- w.slabBuf
		w.slabBuf = nil
	}
}
