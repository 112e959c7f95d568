package pipeline

import (
	"context"
	"runtime"
	"sync"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// hostSlabs is the number of staging slabs: one filling, one being decoded,
// one spare so IO never waits on compute for a whole wave.
const hostSlabs = 3

// hostEngine assembles batches in host memory, decoding on the CPU. It is
// the CPU fallback and the oracle the CUDA engine is tested against.
type hostEngine struct {
	*stages
	pool  *slotPool
	slabs chan []byte
	arena []byte // the decoded chunks of the wave being assembled, then the chunk cache's region
	// mem holds the arena and the slabs, outside the Go heap (hostRegion):
	// buffers of a GiB or more counted as live heap would let as much
	// garbage pile up between collections.
	mem  []byte
	pin  runtime.Pinner // keeps slot memory where DLPack consumers may see it
	full *ptx.Plan      // the assemble plan of a full batch, made by reserve
	// workers holds one hostWorker per CPU worker, borrowed by compute's
	// tasks.
	workers chan *hostWorker
}

func newHostEngine(cfg Config, stats *statsSink) (*hostEngine, error) {
	cfg = cfg.withBuffers(false)
	var secondMiss bool
	cfg.ChunkCacheBytes, secondMiss = cfg.chunkCache(false)
	st, err := newStages(cfg, stats, secondMiss)
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
		st.maps.firstSight = firstSightBytes
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
	var cached int64
	if h.chunks != nil {
		cached = h.chunks.size
	}
	arena := h.lim.arena + cached
	mem, err := hostRegion(arena + hostSlabs*h.lim.slab)
	if err != nil {
		return errorf("new", ErrOutOfMemory, "", "%d bytes for the decoded chunks, the chunk cache and the read slabs (Config.DeviceBufferBytes, Config.ChunkCacheBytes, Config.HostBufferBytes): %v", arena+hostSlabs*h.lim.slab, err)
	}
	h.mem, h.arena = mem, mem[:arena:arena]
	h.slabs = make(chan []byte, hostSlabs)
	for i := range int64(hostSlabs) {
		off := arena + i*h.lim.slab
		h.slabs <- mem[off : off+h.lim.slab : off+h.lim.slab]
	}
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
	return nil
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
	freeHostRegion(h.mem) // nor the arena and the slabs
	h.mem, h.arena = nil, nil
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
		h.planWaves(ctx, reqs, planned, func(j *job) {
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
