package pipeline

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/ptx"
)

// The CUDA engine's fixed geometry.
const (
	cudaSlabs    = 3       // pinned staging slabs: one filling, one copying, one spare
	cudaWaveBufs = 2       // device wave buffers: one decoding, one being filled
	maxWaveJobs  = 16384   // chunks per wave (nvCOMP batch size)
	maxWaveOps   = 1 << 16 // copy ops per wave
	jobDescBytes = 6 * 8   // per GPU chunk: in ptr, in size, out ptr, capacity, actual size, expected size
	statusBytes  = 4       // per GPU chunk: nvCOMP status
	opBytes      = int64(unsafe.Sizeof(ptx.Op{})) + 4
	arenaGuard   = 1 << 20 // bytes after each arena that only overruns reach
	// nvcompEntryBytes is the largest output of one nvCOMP entry (a zstd
	// or LZ4 chunk, a blosc stream) when Config.MaxChunkBytes is 0: the
	// decoders' temp space is sized for it. Larger zstd and LZ4 chunks,
	// and blosc chunks with a larger stream, are decoded on the CPU.
	nvcompEntryBytes = 8 << 20
)

// cudaEngine assembles batches in GPU memory. Per wave: IO workers pread the
// chunks into a pinned slab; CPU workers check checksums, parse frames and
// decide per chunk whether nvCOMP or a CPU worker decodes it (CPU output
// goes into the same slab); the slab's used prefix, with nvCOMP's argument
// arrays and the assemble ops, crosses in one H2D copy; the LZ4 check
// kernel and nvCOMP decode into the wave's arena; a status reduction and
// the assemble kernel follow (and redo, when nvCOMP left chunks undone). Three
// streams (copy, decode, assemble) chained by events keep two waves in
// flight without a host round trip; a waiter thread retires waves in order.
type cudaEngine struct {
	*stages
	ex        *cuda.Executor
	ordinal   int
	kernels   *ptx.Kernels
	lib       *nvcomp.Library
	zstd      *nvcomp.Decoder
	lz4       *nvcomp.Decoder
	empty     cuda.DevicePtr // the one-byte empty LZ4 block that ptx.LZ4Check puts in place of a block that fails
	nvMax     int64          // the largest output of one nvCOMP entry (see nvcompEntryBytes)
	inAlign   int64          // nvCOMP's input alignment (outputs are 256-aligned)
	copyS     cuda.Stream
	decodeS   cuda.Stream
	asmS      cuda.Stream
	shareS    cuda.Stream // Batch.Share's stream (made by the first Share, on the executor)
	slabs     chan *cuda.HostBuffer
	allSlabs  []*cuda.HostBuffer // for close
	mem       cuda.DevicePtr     // one allocation: the wave buffers, then the chunk cache's region
	cacheAt   cuda.DevicePtr     // the chunk cache's region, after the wave buffers
	memEnd    cuda.DevicePtr     // the end of mem
	bufs      []*waveBuf
	bufFree   chan *waveBuf
	nextBuf   int // index of the buffer bufFree gives next (prepare goroutine only)
	pool      *slotPool
	slotMem   []cuda.DevicePtr
	layout    ptx.Layout
	metaRes   int64 // staging bytes reserved per wave for the block table
	committed int64
	sticky    atomic.Pointer[Error] // a CUDA error: every later batch fails with it
	stuck     atomic.Bool           // a wave never finished: close must not wait for the GPU
	wavesRead atomic.Int64          // waves whose reads are done (or skipped)
	wavesDone atomic.Int64          // waves retired
	lateParts atomic.Int64          // parts assembled late (see takeSlots)
	holdersMu sync.Mutex
	holders   map[*batchState]struct{} // batches holding a slot, until emitted (see dropSlots)
}

// waveStatusBytes is what a wave buffer's status allocation holds:
// nvCOMP's status summary, then each part's misfit status (integer
// outputs).
const waveStatusBytes = ptx.StatusSummarySize + maxWaveParts*ptx.MisfitStatusSize

// waveBuf is one device wave buffer: staging (a copy of the slab) then the
// arena nvCOMP decodes into, both addressed from base by the assemble ops,
// as is the chunk cache, which lies after the last wave buffer in the same
// allocation (offsets from base to it are positive).
type waveBuf struct {
	index    int // in cudaEngine.bufs
	base     cuda.DevicePtr
	arena    int64 // offset of the arena from base
	size     int64
	summary  cuda.DevicePtr   // ptx.StatusSummary on the device, then a ptx.MisfitStatus per part (waveStatusBytes)
	sumHost  *cuda.HostBuffer // and its pinned host copy
	start    cuda.Event       // timing events: before the H2D copy,
	h2d      cuda.Event       // after it,
	decStart cuda.Event       // when the decode stream reaches the wave,
	dec      cuda.Event       // after decoding,
	asmStart cuda.Event       // when the assemble stream reaches the wave (its slots taken),
	done     cuda.Event       // after assembly
	late     cuda.Event       // after the assembly of its wave's late parts (cudaWave.late)
	plans    [2][]*ptx.Plan   // the assemble plans (one per part) of the waves using the buffer, in turn: the next wave's are laid out while the last one's may still be redone
	uses     int              // waves that took the buffer (prepare goroutine only)
}

// newCUDAEngine starts the CUDA engine on GPU ordinal; withNVCOMP false
// keeps nvCOMP out even when it is installed (tests compare both paths).
func newCUDAEngine(cfg Config, ordinal int, stats *statsSink, withNVCOMP bool) (*cudaEngine, error) {
	cfg = cfg.withBuffers(true)
	cfg.ChunkCacheBytes, _ = cfg.chunkCache(true) // never the default cache
	ph := newPhases()
	if err := cuda.Init(); err != nil {
		return nil, newError("new", ErrCUDA, "", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, newError("new", ErrCUDA, "", err)
	}
	if ordinal >= n {
		return nil, errorf("new", ErrInvalid, "", "Config.Device = %q: the host has %d GPUs", cfg.Device, n)
	}
	dev, err := cuda.GetDevice(ordinal)
	if err != nil {
		return nil, newError("new", ErrCUDA, "", err)
	}
	st, err := newStages(cfg, stats, false)
	if err != nil {
		return nil, err
	}
	e := &cudaEngine{stages: st, ordinal: ordinal}
	if e.ex, err = cuda.NewExecutor(dev); err != nil {
		st.close()
		return nil, newError("new", ErrCUDA, "", err)
	}
	ph.mark("driver and context")
	if budget := mappedFileBudget(cfg.MappedFileBytes); budget > 0 {
		if ok, err := dev.Attribute(cuda.DevAttrReadOnlyHostRegisterSupported); err == nil && ok == 1 {
			e.maps = newFileMaps(e.ex.Context(), budget)
			e.maps.firstSight, e.maps.firstSightRaw = firstSightBytes, true
		}
	}
	if err := e.setup(withNVCOMP, ph); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// setup loads the kernels and nvCOMP, creates the streams and events, and
// reserves the pinned slabs and the wave buffers. Batch slots come in
// reserve, once the sample shape is known.
func (e *cudaEngine) setup(withNVCOMP bool, ph *phases) error {
	cfg := e.cfg
	decoder := "cpu"
	var libErr error = errors.New("disabled")
	if withNVCOMP {
		var lib *nvcomp.Library
		if lib, libErr = nvcomp.Load(); libErr == nil {
			e.lib = lib
		}
		ph.mark("nvcomp load")
	}
	slab := cfg.HostBufferBytes / cudaSlabs &^ 4095
	arena := cfg.DeviceBufferBytes / cudaWaveBufs &^ 4095
	// With Config.MaxChunkBytes set, the buffers must hold such a chunk
	// (its stored and CPU-decoded bytes in a slab, its decoded bytes in an
	// arena); at 0 the plan checks each chunk of the arrays opened.
	if need := 2*align(cfg.MaxChunkBytes) + 1<<20; cfg.MaxChunkBytes > 0 && slab < need {
		return errorf("new", ErrBudget, "", "Config.HostBufferBytes = %d gives %d-byte staging slabs, below the %d one chunk of Config.MaxChunkBytes = %d needs: raise Config.HostBufferBytes to at least %d, or lower Config.MaxChunkBytes (0: any chunk the buffers hold)", cfg.HostBufferBytes, slab, need, cfg.MaxChunkBytes, roundMiB(need*cudaSlabs))
	}
	if need := align(cfg.MaxChunkBytes); cfg.MaxChunkBytes > 0 && arena < need {
		return errorf("new", ErrBudget, "", "Config.DeviceBufferBytes = %d gives %d-byte wave arenas, below one chunk of Config.MaxChunkBytes = %d: raise Config.DeviceBufferBytes to at least %d, or lower Config.MaxChunkBytes (0: any chunk the buffers hold)", cfg.DeviceBufferBytes, arena, cfg.MaxChunkBytes, roundMiB(need*cudaWaveBufs))
	}
	e.nvMax = min(int64(nvcompEntryBytes), arena)
	if cfg.MaxChunkBytes > 0 {
		e.nvMax = cfg.MaxChunkBytes
	}
	e.lim = waveLimits{slab: slab, arena: arena, jobs: maxWaveJobs, ops: maxWaveOps, opCost: opBytes, readCap: 4 << 20, readGap: 64 << 10,
		slabs: cudaSlabs, arenas: cudaWaveBufs, hostBytes: cfg.HostBufferBytes, deviceBytes: cfg.DeviceBufferBytes}
	// The guard after each arena catches what nvCOMP writes past a damaged
	// zstd chunk's output (it reports the larger size, the status check
	// fails the wave, and nothing outside the wave buffer is touched: not
	// the next buffer, not the chunk cache); a block decodes to at most
	// 128 KiB.
	bufSize := slab + arena + arenaGuard
	var cacheBytes int64
	if e.chunks != nil {
		cacheBytes = e.chunks.size
	}
	memBytes := cudaWaveBufs*bufSize + cacheBytes
	if cfg.MaxGPUMemoryBytes > 0 && memBytes > cfg.MaxGPUMemoryBytes {
		return errorf("new", ErrBudget, "", "wave buffers (%d bytes) and the chunk cache (%d) need %d bytes of GPU memory, above Config.MaxGPUMemoryBytes = %d: raise it, or lower Config.DeviceBufferBytes, Config.HostBufferBytes or Config.ChunkCacheBytes", cudaWaveBufs*bufSize, cacheBytes, memBytes, cfg.MaxGPUMemoryBytes)
	}
	e.inAlign = 1
	err := e.ex.Do(func() error {
		var err error
		if e.kernels, err = ptx.Load(); err != nil {
			return err
		}
		ph.mark("kernels")
		for _, s := range []*cuda.Stream{&e.copyS, &e.decodeS, &e.asmS} {
			if *s, err = cuda.NewStream(cuda.StreamNonBlocking); err != nil {
				return err
			}
		}
		if e.lib != nil {
			for _, alg := range []nvcomp.Algorithm{nvcomp.Zstd, nvcomp.LZ4} {
				a, err := e.lib.Alignment(alg)
				if err != nil {
					return err
				}
				if a.Output > 256 {
					return fmt.Errorf("nvcomp %s needs outputs aligned to %d bytes, more than the 256 the arena gives", alg, a.Output)
				}
				e.inAlign = max(e.inAlign, int64(a.Input))
			}
			dc := nvcomp.DecoderConfig{Algorithm: nvcomp.Zstd, MaxChunks: maxWaveJobs, MaxChunkBytes: int(e.nvMax), MaxTotalBytes: int(arena)}
			if e.zstd, err = e.lib.NewDecoder(dc); err != nil {
				return err
			}
			dc.Algorithm = nvcomp.LZ4
			if e.lz4, err = e.lib.NewDecoder(dc); err != nil {
				return err
			}
			e.committed += int64(e.zstd.TempBytes() + e.lz4.TempBytes())
			if e.empty, err = cuda.MemAlloc(256); err != nil {
				return err
			}
			if err := cuda.CopyHtoD(e.empty, []byte{0}); err != nil {
				return err
			}
			ph.mark("nvcomp decoders")
		}
		e.slabs = make(chan *cuda.HostBuffer, cudaSlabs)
		for range cudaSlabs {
			h, err := cuda.HostMap(int(slab))
			if err != nil {
				return err
			}
			e.slabs <- h
			e.allSlabs = append(e.allSlabs, h)
		}
		ph.mark("pinned staging")
		if e.mem, err = cuda.MemAlloc(int(memBytes)); err != nil {
			return err
		}
		e.committed += memBytes
		e.cacheAt = e.mem + cuda.DevicePtr(cudaWaveBufs*bufSize)
		e.memEnd = e.mem + cuda.DevicePtr(memBytes)
		e.bufFree = make(chan *waveBuf, cudaWaveBufs)
		for i := range cudaWaveBufs {
			b := &waveBuf{index: i, base: e.mem + cuda.DevicePtr(int64(i)*bufSize), arena: slab, size: bufSize}
			e.bufs = append(e.bufs, b)
			if b.summary, err = cuda.MemAlloc(waveStatusBytes); err != nil {
				return err
			}
			if b.sumHost, err = cuda.HostAlloc(waveStatusBytes, 0); err != nil {
				return err
			}
			// Blocking sync: the retire thread sleeps in its waits on h2d,
			// done and late instead of spinning a core each (two cores
			// for an image and its label, at any pace).
			for _, ev := range []*cuda.Event{&b.start, &b.h2d, &b.decStart, &b.dec, &b.asmStart, &b.done, &b.late} {
				if *ev, err = cuda.NewEvent(cuda.EventBlockingSync); err != nil {
					return err
				}
			}
			e.bufFree <- b
		}
		ph.mark("device buffers")
		return nil
	})
	if err != nil {
		return cudaError("new", err)
	}
	if cfg.MaxGPUMemoryBytes > 0 && e.committed > cfg.MaxGPUMemoryBytes {
		return errorf("new", ErrBudget, "", "wave buffers, the chunk cache and nvCOMP scratch need %d bytes of GPU memory, above Config.MaxGPUMemoryBytes = %d: raise it, or lower Config.DeviceBufferBytes, Config.HostBufferBytes or Config.ChunkCacheBytes", e.committed, cfg.MaxGPUMemoryBytes)
	}
	if e.lib != nil {
		decoder = fmt.Sprintf("nvcomp %s + cpu", e.lib.Version)
		cfg.Logger.Info("damacy: CUDA engine: batches in GPU memory, zstd, LZ4 and blosc (zstd or lz4) chunks decoded by nvCOMP, blosc (blosclz) ones by its own kernel, others on the CPU", "device", e.ordinal, "nvcomp", e.lib.Path, "setup", ph)
	} else {
		cfg.Logger.Info("damacy: CUDA engine: batches in GPU memory, chunks decoded on the CPU (nvCOMP not loaded)", "device", e.ordinal, "reason", libErr, "setup", ph)
	}
	e.stats.update(func(s *Stats) {
		s.Engine, s.Decoder = "cuda", decoder
		s.GPUBytesCommitted = e.committed
	})
	return nil
}

// cudaError wraps an error from the GPU side as ErrCUDA (or ErrOutOfMemory).
func cudaError(op string, err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	kind := ErrCUDA
	if errors.Is(err, cuda.ErrOutOfMemory) {
		kind = ErrOutOfMemory
	}
	return newError(op, kind, "", err)
}

func (e *cudaEngine) reserve(shape []int) error {
	e.shape = shape
	e.layout = ptx.Layout{Samples: e.cfg.BatchSize, Shape: shape, Dtype: e.cfg.Dtype.Kernel()}
	if err := e.layout.Validate(); err != nil {
		return newError("new", ErrInvalid, "", err)
	}
	// The block table of a wave has at most one entry per ElemsPerBlock
	// output elements plus one per op: reserve the first part per wave,
	// and each batch's transform table, for as many batches' elements as
	// a wave may carry (see stages.planWaves; fewer when that would take
	// more than an eighth of the slab).
	elems := e.layout.Bytes() / int64(e.layout.Dtype.Size())
	one := align(elems/ptx.ElemsPerBlock*4+4096) + align(int64(e.cfg.BatchSize)*int64(unsafe.Sizeof(ptx.Transform{})))
	if one >= e.lim.slab/2 {
		return errorf("new", ErrBudget, "", "a batch of %d x %v needs %d staging bytes per wave for its block table: raise Config.HostBufferBytes", e.cfg.BatchSize, shape, one)
	}
	k := int64(maxWaveParts)
	for k > 1 && k*one > e.lim.slab/8 {
		k--
	}
	e.metaRes = k * one
	e.lim.slab -= e.metaRes
	e.lim.elems = k * elems
	for _, b := range e.bufs {
		for k := range b.plans {
			pl, err := ptx.NewPlan(e.layout)
			if err != nil {
				return newError("new", ErrInvalid, "", err)
			}
			b.plans[k] = []*ptx.Plan{pl}
		}
	}
	bytes := e.layout.Bytes()
	total := e.committed + int64(e.cfg.BatchSlots)*bytes
	if e.cfg.MaxGPUMemoryBytes > 0 && total > e.cfg.MaxGPUMemoryBytes {
		return errorf("new", ErrBudget, "", "%d batch slots of %d bytes plus %d bytes of wave buffers, scratch and chunk cache need %d bytes of GPU memory, above Config.MaxGPUMemoryBytes = %d: raise it to at least %d, or lower Config.HostBufferBytes (%d; two thirds of it are mirrored on the GPU), Config.DeviceBufferBytes (%d), Config.ChunkCacheBytes (%d) or Config.BatchSlots", e.cfg.BatchSlots, bytes, e.committed, total, e.cfg.MaxGPUMemoryBytes, total, e.cfg.HostBufferBytes, e.cfg.DeviceBufferBytes, e.cfg.ChunkCacheBytes)
	}
	slots := make([]*slot, e.cfg.BatchSlots)
	err := e.ex.Do(func() error {
		for i := range slots {
			p, err := cuda.MemAlloc(int(bytes))
			if err != nil {
				return err
			}
			e.slotMem = append(e.slotMem, p)
			// A plain event: an interprocess one gives the process a
			// file in /dev/shm for the context's life, so Batch.Share
			// makes one only for a slot that is shared.
			ready, err := cuda.NewEvent(cuda.EventDisableTiming)
			if err != nil {
				return err
			}
			s := &slot{index: i, shape: append([]int64{int64(e.cfg.BatchSize)}, toInt64s(shape)...), dtype: e.cfg.Dtype,
				dev: uintptr(p), dev0: e.ordinal, ready: uintptr(e.asmS), readyEvent: ready, gpu: e}
			slots[i] = s
		}
		return nil
	})
	if err != nil {
		return cudaError("new", err)
	}
	e.committed = total
	e.stats.update(func(s *Stats) { s.GPUBytesCommitted = total })
	e.pool = newSlotPool(slots)
	return nil
}

func (e *cudaEngine) slotsInUse() int64 {
	if e.pool == nil {
		return 0
	}
	return e.pool.inUse.Load()
}
