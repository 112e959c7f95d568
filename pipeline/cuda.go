package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
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
	inAlign   int64          // nvCOMP's input alignment (outputs are 256-aligned)
	copyS     cuda.Stream
	decodeS   cuda.Stream
	asmS      cuda.Stream
	slabs     chan *cuda.HostBuffer
	allSlabs  []*cuda.HostBuffer // for close
	bufs      []*waveBuf
	bufFree   chan *waveBuf
	pool      *slotPool
	slotMem   []cuda.DevicePtr
	layout    ptx.Layout
	metaRes   int64 // staging bytes reserved per wave for the block table
	committed int64
	sticky    atomic.Pointer[Error] // a CUDA error: every later batch fails with it
	split     decodeSplit           // how much of nvCOMP's work the CPU takes
	stuck     atomic.Bool           // a wave never finished: close must not wait for the GPU
	wavesRead atomic.Int64          // waves whose reads are done (or skipped)
	wavesDone atomic.Int64          // waves retired
	cpuShare  float64               // route's running CPU share, in bytes (plan goroutine only)
}

// waveBuf is one device wave buffer: staging (a copy of the slab) then the
// arena nvCOMP decodes into, both addressed from base by the assemble ops.
type waveBuf struct {
	base     cuda.DevicePtr
	arena    int64 // offset of the arena from base
	size     int64
	summary  cuda.DevicePtr   // ptx.StatusSummary on the device
	sumHost  *cuda.HostBuffer // and its pinned host copy
	start    cuda.Event       // timing events: before the H2D copy,
	h2d      cuda.Event       // after it,
	decStart cuda.Event       // when the decode stream reaches the wave,
	dec      cuda.Event       // after decoding,
	done     cuda.Event       // after assembly
	plan     *ptx.Plan        // the assemble plan of the wave using the buffer
}

// nvEntry is one nvCOMP input: a whole zstd or LZ4 chunk, or one stream of
// a blosc chunk. in is the offset of its bytes in staging, out the offset
// of its output within the job's decoded bytes.
type nvEntry struct {
	job       *job
	in, inLen int64
	out, size int64
}

// descEntries is how many nvCOMP entries the plan reserves for a GPU job:
// one for a zstd or LZ4 chunk; for blosc, one per 4 KiB of output and at
// least 16 (the most splits of a block), more than the streams c-blosc
// writes at its usual block sizes (a chunk with more streams is decoded on
// the CPU).
func descEntries(j *job) int {
	if j.chunk.Codec.Route().Compression == zarr.CompressionBlosc {
		return max(16, j.layout.Bytes()/4096)
	}
	return 1
}

// entries returns the nvCOMP inputs of a GPU job, and whether they are
// zstd (else LZ4), or nil when nvCOMP must not take it: every zstd input
// is a frame with its exact content size (nvcomp.ZstdGPUCompatible), and a
// blosc chunk has no raw stream. LZ4 blocks are walked on the GPU instead
// (ptx.LZ4Check, the twin of nvcomp.LZ4GPUCheck), just before nvCOMP
// decodes them: on the host the walk costs nearly as much as decoding.
func (e *cudaEngine) entries(j *job, c zarr.Compression, payload []byte, poff int64) ([]nvEntry, bool) {
	n := j.layout.Bytes()
	switch c {
	case zarr.CompressionZstd:
		if poff%e.inAlign == 0 && nvcomp.ZstdGPUCompatible(payload, n) {
			return []nvEntry{{job: j, in: poff, inLen: int64(len(payload)), size: int64(n)}}, true
		}
	case zarr.CompressionLZ4:
		if len(payload) > 4 && (poff+4)%e.inAlign == 0 && binary.LittleEndian.Uint32(payload) == uint32(n) {
			return []nvEntry{{job: j, in: poff + 4, inLen: int64(len(payload) - 4), size: int64(n)}}, false
		}
	case zarr.CompressionBlosc:
		f, err := blosc.Parse(payload)
		if err != nil || f.Header.Nbytes != n || f.Header.Memcpyed() {
			return nil, false
		}
		comp := f.Header.Compressor()
		zs := comp == blosc.Zstd
		if !zs && comp != blosc.LZ4 && comp != blosc.LZ4HC {
			return nil, false
		}
		ents := make([]nvEntry, 0, len(f.Streams))
		for _, st := range f.Streams {
			in := payload[st.Src : st.Src+st.CSize]
			off := poff + int64(st.Src)
			if st.Raw || off%e.inAlign != 0 {
				return nil, false
			}
			if zs && !nvcomp.ZstdGPUCompatible(in, st.Size) {
				return nil, false
			}
			ents = append(ents, nvEntry{job: j, in: off, inLen: int64(st.CSize), out: int64(st.Dst), size: int64(st.Size)})
		}
		setShuffle(&j.psrc, f.Header)
		return ents, zs
	}
	return nil, false
}

// setShuffle records in src the shuffle a blosc chunk's decoded bytes are
// still in, for the gather to undo.
func setShuffle(src *ptx.Source, h blosc.Header) {
	switch h.Shuffle() {
	case blosc.ByteShuffle:
		src.Shuffle = ptx.ByteShuffle
	case blosc.BitShuffle:
		src.Shuffle = ptx.BitShuffle
	default:
		src.Shuffle = ptx.NoShuffle
		return
	}
	src.TypeSize, src.BlockSize = h.Typesize, h.Blocksize
}

// spillCopy is one chunk a CPU worker decoded in place of nvCOMP, to be
// copied to its arena place (dst, from the buffer base).
type spillCopy struct {
	dst int64
	src []byte
}

// cudaWave is a wave on its way through the CUDA engine.
type cudaWave struct {
	*wave
	slab      *cuda.HostBuffer
	buf       *waveBuf
	used      int64     // staging bytes to copy
	ents      []nvEntry // nvCOMP's inputs: zstd first, then LZ4
	nZstd     int
	descOff   int64 // offset of nvCOMP's argument arrays in staging
	plan      *ptx.Plan
	opsOff    int64
	blkOff    int64
	spill     []spillCopy // CPU-decoded chunks that go to the arena by their own copy
	err       error
	submitted bool
}

// newCUDAEngine starts the CUDA engine on GPU ordinal; withNVCOMP false
// keeps nvCOMP out even when it is installed (tests compare both paths).
func newCUDAEngine(cfg Config, ordinal int, stats *statsSink, withNVCOMP bool) (*cudaEngine, error) {
	cfg = cfg.withBuffers(true)
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
	st, err := newStages(cfg, stats)
	if err != nil {
		return nil, err
	}
	e := &cudaEngine{stages: st, ordinal: ordinal}
	if e.ex, err = cuda.NewExecutor(dev); err != nil {
		st.close()
		return nil, newError("new", ErrCUDA, "", err)
	}
	if err := e.setup(withNVCOMP); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// setup loads the kernels and nvCOMP, creates the streams and events, and
// reserves the pinned slabs and the wave buffers. Batch slots come in
// reserve, once the sample shape is known.
func (e *cudaEngine) setup(withNVCOMP bool) error {
	cfg := e.cfg
	decoder := "cpu"
	var libErr error = errors.New("disabled")
	if withNVCOMP {
		var lib *nvcomp.Library
		if lib, libErr = nvcomp.Load(); libErr == nil {
			e.lib = lib
		}
	}
	slab := cfg.HostBufferBytes / cudaSlabs &^ 4095
	arena := cfg.DeviceBufferBytes / cudaWaveBufs &^ 4095
	if need := 2*align(cfg.MaxChunkBytes) + 1<<20; slab < need {
		return errorf("new", ErrBudget, "", "Config.HostBufferBytes = %d gives %d-byte staging slabs, below the %d one chunk of Config.MaxChunkBytes = %d needs: raise it to at least %d or lower MaxChunkBytes", cfg.HostBufferBytes, slab, need, cfg.MaxChunkBytes, need*cudaSlabs)
	}
	if need := align(cfg.MaxChunkBytes); arena < need {
		return errorf("new", ErrBudget, "", "Config.DeviceBufferBytes = %d gives %d-byte wave arenas, below one chunk of Config.MaxChunkBytes = %d: raise it to at least %d or lower MaxChunkBytes", cfg.DeviceBufferBytes, arena, cfg.MaxChunkBytes, need*cudaWaveBufs)
	}
	e.lim = waveLimits{slab: slab, arena: arena, jobs: maxWaveJobs, ops: maxWaveOps, opCost: opBytes, readCap: 4 << 20, readGap: 64 << 10}
	e.inAlign = 1
	err := e.ex.Do(func() error {
		var err error
		if e.kernels, err = ptx.Load(); err != nil {
			return err
		}
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
			dc := nvcomp.DecoderConfig{Algorithm: nvcomp.Zstd, MaxChunks: maxWaveJobs, MaxChunkBytes: int(cfg.MaxChunkBytes), MaxTotalBytes: int(arena)}
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
		}
		e.slabs = make(chan *cuda.HostBuffer, cudaSlabs)
		for range cudaSlabs {
			h, err := cuda.HostAlloc(int(slab), cuda.HostAllocPortable)
			if err != nil {
				return err
			}
			e.slabs <- h
			e.allSlabs = append(e.allSlabs, h)
		}
		e.bufFree = make(chan *waveBuf, cudaWaveBufs)
		for range cudaWaveBufs {
			// The guard after the arena catches what nvCOMP writes past a
			// damaged zstd chunk's output (it reports the larger size, the
			// status check fails the wave, and nothing outside the wave
			// buffer is touched); a block decodes to at most 128 KiB.
			b := &waveBuf{arena: slab, size: slab + arena + arenaGuard}
			e.bufs = append(e.bufs, b)
			if b.base, err = cuda.MemAlloc(int(b.size)); err != nil {
				return err
			}
			e.committed += b.size
			if b.summary, err = cuda.MemAlloc(ptx.StatusSummarySize); err != nil {
				return err
			}
			if b.sumHost, err = cuda.HostAlloc(ptx.StatusSummarySize, 0); err != nil {
				return err
			}
			for _, ev := range []*cuda.Event{&b.start, &b.h2d, &b.decStart, &b.dec, &b.done} {
				if *ev, err = cuda.NewEvent(cuda.EventDefault); err != nil {
					return err
				}
			}
			e.bufFree <- b
		}
		return nil
	})
	if err != nil {
		return cudaError("new", err)
	}
	if cfg.MaxGPUMemoryBytes > 0 && e.committed > cfg.MaxGPUMemoryBytes {
		return errorf("new", ErrBudget, "", "wave buffers and nvCOMP scratch need %d bytes of GPU memory, above Config.MaxGPUMemoryBytes = %d: raise it, or lower DeviceBufferBytes / HostBufferBytes", e.committed, cfg.MaxGPUMemoryBytes)
	}
	if e.lib != nil {
		decoder = fmt.Sprintf("nvcomp %s + cpu", e.lib.Version)
		cfg.Logger.Info("damacy: CUDA engine: batches in GPU memory, zstd, LZ4 and blosc (zstd or lz4) chunks decoded by nvCOMP, others on the CPU", "device", e.ordinal, "nvcomp", e.lib.Path)
	} else {
		cfg.Logger.Info("damacy: CUDA engine: batches in GPU memory, chunks decoded on the CPU (nvCOMP not loaded)", "device", e.ordinal, "reason", libErr)
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
	e.layout = ptx.Layout{Samples: e.cfg.BatchSize, Shape: shape, Dtype: outDtype(e.cfg.Dtype)}
	if err := e.layout.Validate(); err != nil {
		return newError("new", ErrInvalid, "", err)
	}
	// The block table of a wave has at most one entry per ElemsPerBlock
	// output elements plus one per op: reserve the first part per wave.
	e.metaRes = align((e.layout.Bytes()/int64(e.layout.Dtype.Size()))/ptx.ElemsPerBlock*4 + 4096)
	if e.metaRes >= e.lim.slab/2 {
		return errorf("new", ErrBudget, "", "a batch of %d x %v needs %d staging bytes per wave for its block table: raise Config.HostBufferBytes", e.cfg.BatchSize, shape, e.metaRes)
	}
	e.lim.slab -= e.metaRes
	for _, b := range e.bufs {
		var err error
		if b.plan, err = ptx.NewPlan(e.layout); err != nil {
			return newError("new", ErrInvalid, "", err)
		}
	}
	bytes := e.layout.Bytes()
	total := e.committed + int64(e.cfg.BatchSlots)*bytes
	if e.cfg.MaxGPUMemoryBytes > 0 && total > e.cfg.MaxGPUMemoryBytes {
		return errorf("new", ErrBudget, "", "%d batch slots of %d bytes plus %d bytes of wave buffers and scratch need %d bytes of GPU memory, above Config.MaxGPUMemoryBytes = %d: raise it to at least %d, or lower HostBufferBytes (%d; two thirds of it are mirrored on the GPU), DeviceBufferBytes (%d) or BatchSlots", e.cfg.BatchSlots, bytes, e.committed, total, e.cfg.MaxGPUMemoryBytes, total, e.cfg.HostBufferBytes, e.cfg.DeviceBufferBytes)
	}
	slots := make([]*slot, e.cfg.BatchSlots)
	err := e.ex.Do(func() error {
		for i := range slots {
			p, err := cuda.MemAlloc(int(bytes))
			if err != nil {
				return err
			}
			e.slotMem = append(e.slotMem, p)
			// Interprocess, so that Batch.Share can export it; a plain
			// event where the driver refuses that (no CUDA IPC).
			ready, err := cuda.NewEvent(cuda.EventDisableTiming | cuda.EventInterprocess)
			if err != nil {
				ready, err = cuda.NewEvent(cuda.EventDisableTiming)
			}
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

// route decides, at plan time, which decoder a chunk gets and what it
// costs. Chunks nvCOMP may take (by codec; arrays where a chunk was already
// refused stay on the CPU) get arena space, except the CPU's share of them
// (hybrid decode, see decodeSplit). CPU-decoded chunks get staging room
// for their decoded bytes, which travel in the same H2D copy.
func (e *cudaEngine) route(j *job) {
	n := int64(j.layout.Bytes())
	r := j.chunk.Codec.Route()
	eligible := e.zstd != nil && r.Simple && !j.src.cpuOnly.Load() &&
		(r.Compression == zarr.CompressionZstd || r.Compression == zarr.CompressionLZ4 || r.Compression == zarr.CompressionBlosc)
	if eligible {
		if e.cpuShare >= float64(n) {
			e.cpuShare -= float64(n)
			eligible = false
		} else {
			e.cpuShare += e.split.fraction() * float64(n)
		}
	}
	j.gpu = eligible
	if j.gpu {
		j.slabCost = j.chunk.Length + int64(descEntries(j))*(jobDescBytes+statusBytes)
		j.arenaCost = n
		return
	}
	j.decInSlab = true
	j.slabCost = j.chunk.Length + align(n)
}

// headStage reports whether the oldest wave not yet retired is still
// being read (stageIO) or is past its reads: checks, CPU decode, the GPU.
// Waves are read and retired in the same order.
func (e *cudaEngine) headStage() stage {
	if e.wavesRead.Load() > e.wavesDone.Load() {
		return stageCompute
	}
	return stageIO
}

func (e *cudaEngine) run(ctx context.Context, reqs <-chan *batchReq, out chan<- *result) {
	planned := make(chan *wave, 4)
	loaded := make(chan *cudaWave, 1)
	prepared := make(chan *cudaWave, 1)
	submitted := make(chan *cudaWave, cudaWaveBufs)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		e.plan(ctx, reqs, planned, e.route)
	}()
	go func() { // read: preads into a pinned slab
		defer wg.Done()
		defer close(loaded)
		for w := range planned {
			cw := &cudaWave{wave: w}
			if w.batch.failed() == nil && e.sticky.Load() == nil {
				e.load(ctx, cw)
			}
			e.wavesRead.Add(1)
			select {
			case loaded <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	go func() { // route, CPU-decode, lay out the H2D copy
		defer wg.Done()
		defer close(prepared)
		for cw := range loaded {
			if cw.err == nil && cw.batch.failed() == nil && e.sticky.Load() == nil {
				e.prepare(ctx, cw)
			}
			select {
			case prepared <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer close(submitted)
		for cw := range prepared {
			bs := cw.batch
			if cw.err == nil && bs.failed() == nil && bs.slot == nil {
				s, err := e.pool.get(ctx)
				if err != nil {
					e.recycle(cw)
					return
				}
				bs.slot = s
			}
			if cw.err == nil && bs.failed() == nil {
				if err := e.submit(cw); err != nil {
					cw.err = err
				}
			}
			select {
			case submitted <- cw:
			case <-ctx.Done():
				e.recycle(cw)
				return
			}
		}
	}()
	e.retire(ctx, submitted, out)
	wg.Wait()
}

// recycle gives a wave's slab and wave buffer back without using them.
func (e *cudaEngine) recycle(cw *cudaWave) {
	if cw.slab != nil {
		e.slabs <- cw.slab
		cw.slab = nil
	}
	if cw.buf != nil {
		e.bufFree <- cw.buf
		cw.buf = nil
	}
}

// load reads a wave into a pinned slab. Errors are the batch's (cw.err).
func (e *cudaEngine) load(ctx context.Context, cw *cudaWave) {
	select {
	case cw.slab = <-e.slabs:
	case <-ctx.Done():
		cw.err = ctx.Err()
		return
	}
	if err := e.read(ctx, cw.wave, cw.slab.Bytes()); err != nil {
		cw.err = err
	}
}

// prepare routes a loaded wave's chunks, decodes those the CPU takes, and
// lays out everything its H2D copy carries. Errors are the batch's
// (cw.err).
func (e *cudaEngine) prepare(ctx context.Context, cw *cudaWave) {
	w := cw.wave
	fail := func(err error) { cw.err = err }
	slab := cw.slab.Bytes()
	bp := w.batch.plan
	end := int64(0)
	for _, r := range w.reads {
		end = max(end, align(r.slabOff+r.length))
	}
	// Final routing, now that the bytes are here (see check); the chunks
	// nvCOMP does not take are decoded on the CPU, into the slab when
	// planned so, else into the spill buffer, from which submit copies
	// them to their arena place. The checks read the chunks nvCOMP may
	// take (checksums, LZ4 sequences), so CPU workers run them in
	// parallel; the lists are then built in wave order.
	// Tasks take runs of jobs: one task per job costs more in handoffs
	// than a zstd header check.
	checks := make([]chunkCheck, len(w.jobs))
	var checked atomic.Int64
	tasks := min(len(w.jobs), 4*e.cpu.n)
	t := time.Now()
	err := e.cpu.run(ctx, tasks, func(k int) error {
		for i := k * len(w.jobs) / tasks; i < (k+1)*len(w.jobs)/tasks; i++ {
			j := bp.jobs[w.jobs[i]]
			c, err := e.check(j, slab[j.slabOff:j.slabOff+j.chunk.Length])
			if err != nil {
				return err
			}
			if j.gpu {
				checked.Add(j.chunk.Length)
			}
			checks[i] = c
		}
		return nil
	}, e.trace.workers("check", "cpu", w, 0))
	e.stats.update(func(st *Stats) { st.Check.add(time.Since(t), checked.Load(), 0) })
	if err != nil {
		fail(err)
		return
	}
	var cpu, spill []*job
	where := map[*job]int64{} // decoded bytes' offset from the wave buffer's base
	var zstdEnts, lz4Ents []nvEntry
	entryBudget := 0 // descriptor entries the plan reserved for the wave's GPU jobs
	for _, ji := range w.jobs {
		if j := bp.jobs[ji]; j.gpu {
			entryBudget += descEntries(j)
		}
	}
	for i, ji := range w.jobs {
		j, c := bp.jobs[ji], &checks[i]
		if c.inPlace {
			where[j] = c.poff
			continue
		}
		ents := c.ents
		if len(ents) > 0 && len(zstdEnts)+len(lz4Ents)+len(ents) > entryBudget {
			ents = nil // more streams than the plan reserved room for
			c.cpuPrep(j)
		}
		switch {
		case len(ents) > 0 && c.zstd:
			zstdEnts = append(zstdEnts, ents...)
		case len(ents) > 0:
			lz4Ents = append(lz4Ents, ents...)
		case j.gpu:
			j.src.noteSpill()
			spill = append(spill, j)
		default:
			cpu = append(cpu, j)
		}
	}
	// CPU-decoded chunks land after the reads.
	for _, j := range cpu {
		where[j] = end
		end += align(int64(j.layout.Bytes()))
	}
	// The spill buffer is the wave's own: submit copies from it later.
	var spillEnd int64
	for _, j := range spill {
		spillEnd = max(spillEnd, j.decOff+int64(j.layout.Bytes()))
	}
	spillBuf := make([]byte, spillEnd)
	dst := make(map[*job][]byte, len(cpu)+len(spill))
	for _, j := range cpu {
		off, n := where[j], int64(j.layout.Bytes())
		dst[j] = slab[off : off+n : off+n]
	}
	for _, j := range spill {
		off, n := j.decOff, int64(j.layout.Bytes())
		dst[j] = spillBuf[off : off+n : off+n]
	}
	t = time.Now()
	err = e.decodeCPU(ctx, w, slab, func(j *job) bool { return dst[j] != nil }, func(j *job) []byte { return dst[j] })
	if err != nil {
		fail(err)
		return
	}
	var cpuBytes int64
	for _, j := range cpu {
		cpuBytes += int64(j.layout.Bytes())
	}
	e.split.cpuDone(cpuBytes, time.Since(t))
	// Only now take a wave buffer: the CPU work above overlaps the GPU's
	// work on the waves before.
	t = time.Now()
	select {
	case cw.buf = <-e.bufFree:
	case <-ctx.Done():
		fail(ctx.Err())
		return
	}
	e.split.waited(time.Since(t))
	cw.spill = cw.spill[:0]
	for _, j := range spill {
		where[j] = cw.buf.arena + j.decOff
		cw.spill = append(cw.spill, spillCopy{dst: cw.buf.arena + j.decOff, src: spillBuf[j.decOff : j.decOff+int64(j.layout.Bytes())]})
	}
	// nvCOMP's argument arrays: ptrs, sizes, out ptrs, capacities, actual
	// sizes, expected sizes (8 bytes each), then statuses; zstd entries
	// first, then LZ4.
	cw.ents = append(zstdEnts, lz4Ents...)
	cw.nZstd = len(zstdEnts)
	var arena int64
	base := int64(cw.buf.base)
	for _, en := range cw.ents {
		j := en.job
		where[j] = cw.buf.arena + j.decOff
		arena = max(arena, j.decOff+int64(j.layout.Bytes()))
	}
	n := int64(len(cw.ents))
	cw.descOff = end
	desc := slab[end : end+n*jobDescBytes]
	for i, en := range cw.ents {
		put := func(k int, v uint64) { binary.LittleEndian.PutUint64(desc[(int64(k)*n+int64(i))*8:], v) }
		put(0, uint64(base+en.in))
		put(1, uint64(en.inLen))
		put(2, uint64(base+cw.buf.arena+en.job.decOff+en.out))
		put(3, uint64(en.size))
		put(4, 0)
		put(5, uint64(en.size))
	}
	end += align(n*jobDescBytes + n*statusBytes)
	// The assemble ops, with every source addressed from the buffer base.
	p, err := planFor(cw.buf.plan, len(w.batch.req.samples))
	if err != nil {
		fail(err)
		return
	}
	if _, err := e.assemblePlan(p, w, func(j *job) int64 { return where[j] }); err != nil {
		fail(err)
		return
	}
	cw.plan = p
	ops, blocks := ptx.OpBytes(p.Ops()), ptx.BlockOpBytes(p.BlockOps())
	if end+align(int64(len(ops)))+int64(len(blocks)) > int64(len(slab)) {
		fail(errorf("plan", ErrBudget, "", "wave layout overflow: %d ops and %d blocks do not fit the %d-byte slab (a planning bug)", len(p.Ops()), len(p.BlockOps()), len(slab)))
		return
	}
	cw.opsOff = end
	copy(slab[end:], ops)
	end = align(end + int64(len(ops)))
	cw.blkOff = end
	copy(slab[end:], blocks)
	end = align(end + int64(len(blocks)))
	if end > int64(len(slab)) || arena > cw.buf.size-cw.buf.arena-arenaGuard {
		fail(errorf("plan", ErrBudget, "", "wave layout overflow: %d staging bytes of %d, %d arena bytes of %d (a planning bug)", end, len(slab), arena, cw.buf.size-cw.buf.arena-arenaGuard))
		return
	}
	cw.used = end
}

// chunkCheck is how one chunk of a loaded wave is decoded: read in place
// (raw bytes at poff in the slab), by nvCOMP (ents, zstd or LZ4), or else
// on the CPU.
type chunkCheck struct {
	inPlace bool
	poff    int64
	ents    []nvEntry
	zstd    bool
	payload []byte // the blosc frame, for cpuPrep
}

// cpuPrep readies job j for the CPU decoder: a blosc chunk is decoded
// without its unshuffle, which the gather undoes, as for nvCOMP.
func (c *chunkCheck) cpuPrep(j *job) {
	r := j.chunk.Codec.Route()
	if !r.Simple || r.Compression != zarr.CompressionBlosc {
		return
	}
	if h, err := blosc.ParseHeader(c.payload); err == nil {
		j.bloscPayload = c.payload
		setShuffle(&j.psrc, h)
	}
}

// check routes one chunk of a loaded wave (stored: its bytes in the slab):
// its checksum is verified and stripped; a raw chunk is read in place; a
// zstd, LZ4 or blosc (lz4 or zstd streams) chunk routed to the GPU that
// passes nvCOMP's checks becomes nvCOMP entries; the others go to the CPU.
// It touches only j, so checks of a wave run in parallel.
func (e *cudaEngine) check(j *job, stored []byte) (chunkCheck, error) {
	j.bloscPayload = nil
	j.psrc.Shuffle, j.psrc.TypeSize, j.psrc.BlockSize = ptx.NoShuffle, 0, 0
	r := j.chunk.Codec.Route()
	var c chunkCheck
	if r.Simple {
		var err error
		if c.payload, err = j.chunk.Payload(stored); err != nil {
			return c, decodeError(j, err)
		}
	}
	c.poff = j.slabOff + int64(payloadOffset(stored, c.payload))
	n := j.layout.Bytes()
	if r.Simple && r.Compression == zarr.CompressionNone && len(c.payload) == n && c.poff%int64(j.src.dtype.Size()) == 0 {
		c.inPlace = true
		return c, nil
	}
	if j.gpu {
		c.ents, c.zstd = e.entries(j, r.Compression, c.payload, c.poff)
	}
	if len(c.ents) == 0 {
		c.cpuPrep(j)
	}
	return c, nil
}

// payloadOffset is where payload starts inside stored (a sub-slice of it).
func payloadOffset(stored, payload []byte) int {
	if len(payload) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(payload))) - uintptr(unsafe.Pointer(unsafe.SliceData(stored))))
}

// submit queues a prepared wave on the GPU: H2D on the copy stream, nvCOMP
// and the status reduction on the decode stream, assembly on the assemble
// stream, chained by events. Nothing here waits for the GPU.
func (e *cudaEngine) submit(cw *cudaWave) error {
	b, sl := cw.buf, cw.batch.slot
	slab := cw.slab.Bytes()
	n := len(cw.ents)
	first := cw.index == 0
	err := e.ex.Do(func() error {
		if err := b.start.Record(e.copyS); err != nil {
			return err
		}
		if err := e.copyS.CopyHtoD(b.base, slab[:cw.used]); err != nil {
			return err
		}
		if err := b.h2d.Record(e.copyS); err != nil {
			return err
		}
		if err := e.decodeS.WaitEvent(b.h2d); err != nil {
			return err
		}
		if err := b.decStart.Record(e.decodeS); err != nil {
			return err
		}
		if n > 0 {
			desc := b.base + cuda.DevicePtr(cw.descOff)
			arr := func(k, from int) cuda.DevicePtr { return desc + cuda.DevicePtr((k*n+from)*8) }
			statuses := desc + cuda.DevicePtr(6*n*8)
			batch := func(from, count, capacity int) *nvcomp.Batch {
				return &nvcomp.Batch{N: count, CompressedPtrs: arr(0, from), CompressedBytes: arr(1, from), OutputPtrs: arr(2, from),
					OutputCapacities: arr(3, from), TotalCapacity: capacity, OutputSizes: arr(4, from), Statuses: statuses + cuda.DevicePtr(4*from)}
			}
			// One batched call per run of entries within the decoder's
			// limits (chunks per call, total output); calls on one stream
			// run in order, sharing the decoder's temp space.
			if cw.nZstd < n {
				if err := e.kernels.LZ4Check(e.decodeS, arr(0, cw.nZstd), arr(1, cw.nZstd), arr(5, cw.nZstd), n-cw.nZstd, e.empty); err != nil {
					return err
				}
			}
			for from := 0; from < n; {
				d := e.zstd
				last := cw.nZstd
				if from >= cw.nZstd {
					d, last = e.lz4, n
				}
				cfg := d.Config()
				to, total := from, 0
				for to < last && to-from < cfg.MaxChunks && total+int(cw.ents[to].size) <= cfg.MaxTotalBytes {
					total += int(cw.ents[to].size)
					to++
				}
				if to == from {
					return fmt.Errorf("nvcomp: entry of %d bytes exceeds the decoder's %d", cw.ents[from].size, cfg.MaxTotalBytes)
				}
				if err := d.Decode(e.decodeS, batch(from, to-from, total)); err != nil {
					return err
				}
				from = to
			}
			if err := e.kernels.ReduceStatus(e.decodeS, statuses, arr(4, 0), arr(5, 0), n, b.summary); err != nil {
				return err
			}
		}
		for _, c := range cw.spill {
			// From pageable memory: the driver stages the bytes before
			// returning, so the spill buffer is free again afterwards.
			if err := e.decodeS.CopyHtoD(b.base+cuda.DevicePtr(c.dst), c.src); err != nil {
				return err
			}
		}
		if err := b.dec.Record(e.decodeS); err != nil {
			return err
		}
		if err := e.asmS.WaitEvent(b.dec); err != nil {
			return err
		}
		if first {
			for _, a := range sl.takeAfter() {
				if err := e.asmS.WaitEvent(a.ev); err != nil {
					return err
				}
				if a.own {
					if err := a.ev.Destroy(); err != nil {
						return err
					}
				}
			}
		}
		ops, blocks := b.base+cuda.DevicePtr(cw.opsOff), b.base+cuda.DevicePtr(cw.blkOff)
		if err := e.kernels.Assemble(e.asmS, cw.plan, ops, blocks, b.base, b.size, cuda.DevicePtr(sl.dev)); err != nil {
			return err
		}
		if n > 0 {
			if err := e.asmS.CopyDtoH(b.sumHost.Bytes(), b.summary); err != nil {
				return err
			}
		}
		if err := b.done.Record(e.asmS); err != nil {
			return err
		}
		if cw.last {
			return sl.readyEvent.Record(e.asmS)
		}
		return nil
	})
	if err != nil {
		ce := cudaError("submit", err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	cw.submitted = true
	return nil
}

// retire waits for each wave in order on a thread with the context
// current: it frees the slab once its copy is done and the wave buffer once
// the wave is assembled, checks nvCOMP's statuses, and emits each batch
// after its last wave.
func (e *cudaEngine) retire(ctx context.Context, in <-chan *cudaWave, out chan<- *result) {
	unlock, err := cuda.LockThread(e.ex.Context())
	if err != nil {
		e.sticky.CompareAndSwap(nil, cudaError("retire", err))
	} else {
		defer unlock()
	}
	for {
		var cw *cudaWave
		select {
		case cw = <-in:
		case <-ctx.Done():
			return
		}
		if cw == nil {
			return
		}
		if cw.submitted {
			e.finish(ctx, cw)
		}
		e.recycle(cw)
		e.wavesDone.Add(1)
		bs := cw.batch
		if cw.err != nil {
			bs.fail(cw.err)
		}
		if se := e.sticky.Load(); se != nil {
			bs.fail(se)
		}
		if !cw.last {
			continue
		}
		if !bs.emit(ctx, out) {
			return
		}
	}
}

// finish waits for a submitted wave, records its stage times, and checks
// its chunks' statuses.
func (e *cudaEngine) finish(ctx context.Context, cw *cudaWave) {
	b := cw.buf
	if e.stuck.Load() { // behind a stuck wave: the GPU keeps this one's memory too
		if se := e.sticky.Load(); se != nil {
			cw.err = se
		}
		cw.slab, cw.buf = nil, nil
		return
	}
	if err := e.wait(b.h2d, "h2d"); err != nil {
		cw.err = err
		if errors.Is(err, errStuck) { // the GPU still owns the slab and the buffer
			cw.slab, cw.buf = nil, nil
			return
		}
	}
	e.slabs <- cw.slab
	cw.slab = nil
	if err := e.wait(b.done, "assemble"); err != nil {
		cw.err = err
		if errors.Is(err, errStuck) {
			cw.buf = nil
		}
		return
	}
	h2d, _ := cuda.EventElapsedTime(b.start, b.h2d)
	dec, _ := cuda.EventElapsedTime(b.decStart, b.dec)
	asm, _ := cuda.EventElapsedTime(b.dec, b.done)
	var in, outB int64
	jobs := 0
	for i, en := range cw.ents {
		in += en.inLen
		outB += en.size
		if i == 0 || cw.ents[i-1].job != en.job {
			jobs++
		}
	}
	elems := int64(0)
	for _, op := range cw.plan.Ops() {
		n := int64(1)
		for d := range len(e.shape) {
			n *= int64(op.Extent[d])
		}
		elems += n
	}
	e.split.gpuDone(outB, dec)
	if e.trace != nil {
		// Place the GPU spans on the host clock: the wave ended (done)
		// about now; the events give each point's distance from start.
		now := time.Now()
		total, _ := cuda.EventElapsedTime(b.start, b.done)
		t0 := now.Add(-total)
		at := func(ev cuda.Event) time.Time { d, _ := cuda.EventElapsedTime(b.start, ev); return t0.Add(d) }
		id := cw.batch.req.id
		e.trace.span(Span{Stage: "h2d", Lane: "copy stream", Batch: id, Wave: cw.index, Start: t0, End: at(b.h2d), Bytes: cw.used})
		e.trace.span(Span{Stage: "decode", Lane: "decode stream", Batch: id, Wave: cw.index, Start: at(b.decStart), End: at(b.dec), Bytes: outB})
		e.trace.span(Span{Stage: "assemble", Lane: "assemble stream", Batch: id, Wave: cw.index, Start: at(b.dec), End: now, Bytes: elems * int64(e.layout.Dtype.Size())})
	}
	e.stats.update(func(s *Stats) {
		s.H2D.add(h2d, cw.used, cw.used)
		if len(cw.ents) > 0 {
			s.Decompress.add(dec, in, outB)
			s.ChunksGPU += int64(jobs)
			s.ChunksDecoded += int64(jobs)
		}
		s.Assemble.add(asm, 0, elems*int64(e.layout.Dtype.Size()))
		s.WavesEmitted++
	})
	if len(cw.ents) == 0 {
		return
	}
	sum, err := ptx.DecodeStatusSummary(b.sumHost.Bytes())
	if err != nil {
		cw.err = newError("decode", ErrDecode, "", err)
		return
	}
	if sum.Bad > 0 {
		cw.err = e.redo(ctx, cw, sum)
	}
}

// redo handles a wave whose status summary counts chunks that nvCOMP did
// not decode (a failed status or a wrong size; an LZ4 block the GPU check
// refused decodes to nothing). It finds them in the per-chunk statuses,
// reads and decodes them again on the CPU, copies them to their places in
// the arena and assembles the wave again, so a chunk that only nvCOMP
// cannot decode still gives the right data. Only refused LZ4 blocks are
// known to have left the arena alone (every other LZ4 block passed the
// walk); a failed zstd frame may have written anywhere in it (nvCOMP does
// not bound its writes), so then every nvCOMP chunk of the wave is decoded
// again. A chunk the CPU cannot decode either is the wave's ErrDecode. It
// runs on the retire thread after the wave is done: the wave buffer still
// holds the wave's assemble ops and arena, and the batch's slot is not yet
// handed out.
func (e *cudaEngine) redo(ctx context.Context, cw *cudaWave, sum ptx.StatusSummary) error {
	b, n := cw.buf, len(cw.ents)
	gpuErr := func(stage string, err error) error {
		ce := cudaError(stage, err)
		e.sticky.CompareAndSwap(nil, ce)
		return ce
	}
	desc := b.base + cuda.DevicePtr(cw.descOff)
	statuses, actual := make([]byte, 4*n), make([]byte, 8*n)
	if err := cuda.CopyDtoH(statuses, desc+cuda.DevicePtr(6*n*8)); err != nil {
		return gpuErr("decode", err)
	}
	if err := cuda.CopyDtoH(actual, desc+cuda.DevicePtr(4*n*8)); err != nil {
		return gpuErr("decode", err)
	}
	var jobs []*job
	why := map[*job]error{}
	zstdFailed := false
	for i, en := range cw.ents {
		status := nvcomp.Status(int32(binary.NativeEndian.Uint32(statuses[4*i:])))
		size := binary.NativeEndian.Uint64(actual[8*i:])
		if err := nvcomp.CheckChunk(i, status, size, int(en.size)); err != nil && why[en.job] == nil {
			why[en.job] = err
			jobs = append(jobs, en.job)
			zstdFailed = zstdFailed || i < cw.nZstd
			en.job.src.noteSpill() // an array whose chunks keep failing goes to the CPU
		}
	}
	if len(jobs) == 0 {
		return errorf("decode", ErrDecode, "", "%d chunks of the wave failed on the GPU, but their statuses read back clean (status %d, %d bytes of %d)", sum.Bad, sum.Status, sum.Actual, sum.Expected)
	}
	failed := len(jobs)
	if zstdFailed {
		jobs = jobs[:0]
		for i, en := range cw.ents {
			if i == 0 || cw.ents[i-1].job != en.job {
				jobs = append(jobs, en.job)
			}
		}
	}
	outs := make([][]byte, len(jobs))
	err := e.cpu.run(ctx, len(jobs), func(k int) error {
		j := jobs[k]
		stored := make([]byte, j.chunk.Length)
		if err := e.fds.read(&readOp{src: j.src, key: j.chunk.Key, offset: j.chunk.Offset, length: j.chunk.Length}, stored); err != nil {
			return err
		}
		out := make([]byte, j.layout.Bytes())
		if err := e.decodeAgain(j, stored, out); err != nil {
			nv := why[j]
			if nv == nil {
				nv = errors.New("decoded, but another chunk of the wave failed")
			}
			return errorf("decode", ErrDecode, j.src.uri, "chunk %s at offset %d (%d bytes): %v (nvCOMP: %v)", j.chunk.Key, j.chunk.Offset, j.chunk.Length, err, nv)
		}
		outs[k] = out
		return nil
	}, nil)
	if err != nil {
		return err
	}
	for k, j := range jobs {
		if err := cuda.CopyHtoD(b.base+cuda.DevicePtr(b.arena+j.decOff), outs[k]); err != nil {
			return gpuErr("decode", err)
		}
	}
	ops, blocks := b.base+cuda.DevicePtr(cw.opsOff), b.base+cuda.DevicePtr(cw.blkOff)
	if err := e.kernels.Assemble(e.asmS, cw.plan, ops, blocks, b.base, b.size, cuda.DevicePtr(cw.batch.slot.dev)); err != nil {
		return gpuErr("assemble", err)
	}
	if err := e.asmS.Synchronize(); err != nil {
		return gpuErr("assemble", err)
	}
	e.stats.update(func(s *Stats) {
		s.ChunksGPU -= int64(failed)
		s.ChunksRedecoded += int64(len(jobs))
	})
	return nil
}

// decodeAgain decodes the stored bytes of a chunk nvCOMP did not decode
// into out as nvCOMP would have: a blosc chunk without its unshuffle,
// which the gather undoes.
func (e *cudaEngine) decodeAgain(j *job, stored, out []byte) error {
	var payload []byte
	if j.chunk.Codec.Route().Compression == zarr.CompressionBlosc {
		var err error
		if payload, err = j.chunk.Payload(stored); err != nil {
			return err
		}
	}
	return e.decodeJob(j, stored, out, payload)
}

// waveDeadline bounds the wait for one wave. A wave takes milliseconds;
// nvCOMP can spin forever on some damaged zstd data (its headers call
// corrupt input undefined behaviour), and Pop must not hang on that.
const waveDeadline = time.Minute

// errStuck marks a wave the GPU never finished.
var errStuck = errors.New("the GPU did not finish a wave within " + waveDeadline.String() + " (damaged input to nvCOMP?); the CUDA context is unusable")

// wait blocks until ev has completed, for at most waveDeadline. Any failure
// is sticky: the CUDA context cannot be trusted afterwards.
func (e *cudaEngine) wait(ev cuda.Event, stage string) error {
	done := make(chan error, 1)
	go func() { done <- ev.Synchronize() }()
	var err error
	select {
	case err = <-done:
		if err == nil {
			return nil
		}
		err = cudaError(stage, err)
	case <-time.After(waveDeadline):
		// The goroutine above stays blocked with the GPU.
		e.stuck.Store(true)
		err = newError(stage, ErrCUDA, "", errStuck)
	}
	e.sticky.CompareAndSwap(nil, err.(*Error))
	return err
}

// close frees everything once run has returned. Slots still held by the
// consumer are freed when they come back.
func (e *cudaEngine) close() error {
	var first error
	if e.stuck.Load() {
		// Synchronizing or freeing would block behind the stuck wave:
		// leave the GPU state to the process's exit.
		e.stages.close()
		return nil
	}
	if e.ex != nil {
		err := e.ex.Do(func() error {
			var errs []error
			for _, s := range []cuda.Stream{e.copyS, e.decodeS, e.asmS} {
				if s != 0 {
					errs = append(errs, s.Synchronize())
				}
			}
			if e.zstd != nil {
				errs = append(errs, e.zstd.Close())
			}
			if e.lz4 != nil {
				errs = append(errs, e.lz4.Close())
			}
			if e.empty != 0 {
				errs = append(errs, e.empty.Free())
			}
			for _, b := range e.bufs {
				errs = append(errs, b.base.Free(), b.summary.Free())
				if b.sumHost != nil {
					errs = append(errs, b.sumHost.Free())
				}
				for _, ev := range []*cuda.Event{&b.start, &b.h2d, &b.decStart, &b.dec, &b.done} {
					errs = append(errs, ev.Destroy())
				}
			}
			// Every slab, also those of waves still in flight when run
			// returned: the streams are idle now.
			for _, h := range e.allSlabs {
				errs = append(errs, h.Free())
			}
			for _, s := range []*cuda.Stream{&e.copyS, &e.decodeS} {
				errs = append(errs, s.Destroy())
			}
			return errors.Join(errs...)
		})
		first = err
	}
	e.stages.close()
	if e.pool == nil {
		e.closeExecutor()
	} else {
		// Slots held by the consumer are freed when released; the
		// executor, the assemble stream and the kernels live until then.
		e.pool.close(func(s *slot) {
			e.ex.Do(func() error {
				p := cuda.DevicePtr(s.dev)
				return errors.Join(p.Free(), s.readyEvent.Destroy())
			})
		}, e.closeExecutor)
	}
	if first != nil {
		return cudaError("close", first)
	}
	return nil
}

// closeExecutor frees what the last slot needed and stops the executor.
func (e *cudaEngine) closeExecutor() {
	if e.ex == nil {
		return
	}
	e.ex.Do(func() error {
		err := e.asmS.Synchronize()
		if e.kernels != nil {
			err = errors.Join(err, e.kernels.Unload())
		}
		return errors.Join(err, e.asmS.Destroy())
	})
	e.ex.Close()
}
