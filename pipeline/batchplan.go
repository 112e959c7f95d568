package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

// job is one stored chunk a batch needs, read and decoded once however
// many of the batch's samples use it.
type job struct {
	src    *source
	chunk  zarr.Chunk
	layout zarr.Layout
	psrc   ptx.Source // the decoded chunk as the gather reads it; Offset set per wave

	gpu        bool  // decoded by nvCOMP (CUDA engine) rather than on the CPU
	decInSlab  bool  // its decoded bytes go to the slab, after the reads (CPU decode on the CUDA engine)
	rawInPlace bool  // a raw chunk the CUDA engine reads where it lands in staging: no room for a copy, its offset aligned (wave.layout)
	slabCost   int64 // staging bytes the job needs
	arenaCost  int64 // decoded-arena bytes the job needs

	slabOff      int64  // where its stored bytes land in the slab
	bloscPayload []byte // CUDA engine: a blosc chunk the CPU decodes without unshuffling
	decOff       int64  // where its decoded bytes go: in the slab when decInSlab, else in the arena
	readOp       int    // the read op that brings it in
	waveUses     int    // copies that read it

	hit      *cacheEntry // the chunk cache holds it decoded (pinned): nothing to read or decode
	cacheKey *chunkKey   // a chunk cache miss: the key its decoded bytes are cached under
}

// batchPlan is the work of one batch: its jobs and copies, cut into waves.
type batchPlan struct {
	jobs   []*job      // the jobs of the zarr-level plan, with what the engines add
	copies []plan.Copy // their Job indexes jobs
	fills  []uint32    // per sample: its array's fill value, as float32 bits
	waves  []*wave
	box    int64 // bytes of the boxes in their source dtypes
}

// wave is the slice of a batch read, decoded and assembled together.
type wave struct {
	batch  *batchState
	index  int
	jobs   []int // indexes into batchPlan.jobs: the chunks it reads and decodes
	hits   []int // indexes into batchPlan.jobs: the chunks it finds in the chunk cache
	copies []int // indexes into batchPlan.copies
	reads  []readOp
	slab   int64 // staging bytes the cut counted for it, and for the waves before it in its slab
	arena  int64 // the end of its decoded bytes in the arena
	ops    int   // copy ops
	elems  int64 // output elements of its copies, and of those of the waves before it in its slab
	last   bool  // the batch's last wave

	// A batch's first wave may share the slab, arena and nvCOMP calls of
	// the previous batch's last wave (see stages.planWaves): it is carried,
	// its reads start at slabAt and its decoded bytes at arenaAt, after
	// those of the wave it joins, whose joinsNext is set.
	carried   bool
	joinsNext bool
	slabAt    int64
	arenaAt   int64
	slabEnd   int64 // after layout: where its reads and slab-decoded chunks end
	prior     int   // jobs of the waves before it in its slab

	slabBuf []byte     // host engine: the slab holding the wave's reads
	mapped  []*fileMap // per read: the mapped file it is read from (nil: preads into the slab); nil when none is
}

// inSlab returns the job's stored bytes in its wave's slab.
func (j *job) inSlab(slab []byte) []byte { return slab[j.slabOff : j.slabOff+j.chunk.Length] }

// readOp is one pread: Length bytes of a file at Offset into the slab.
type readOp struct {
	src     *source
	key     string
	offset  int64
	length  int64
	slabOff int64
}

// batchState follows one batch through the stages. Its error is set by
// whichever stage fails first and read by the others.
type batchState struct {
	req  *batchReq
	plan *batchPlan
	slot *slot
	t0   time.Time
	skip bool // Config.OnError is OnErrorSkip: a sample's error keeps the slot (keepsSlot)

	mu  sync.Mutex
	err error
}

// fail records the first error of a batch.
func (bs *batchState) fail(err error) {
	bs.mu.Lock()
	if bs.err == nil {
		bs.err = err
	}
	bs.mu.Unlock()
}

// emit hands the finished batch to Pop: its slot, or its error (the slot
// going back, unless keepsSlot: then both). It reports false when ctx
// ended first. It is the engines' one exit for results: an error that is
// not an *Error can only be the engine's context ending a stage (Close),
// and leaves as ErrShutdown; an error about a chunk names the first
// sample that reads it.
func (bs *batchState) emit(ctx context.Context, out chan<- *result) bool {
	r := &result{req: bs.req, slot: bs.slot, err: bs.attribute(bs.failed())}
	if _, ok := r.err.(*Error); r.err != nil && !ok {
		r.err = newError("pop", ErrShutdown, "", r.err)
	}
	if r.err != nil && r.slot != nil && !bs.keepsSlot(r.err) {
		r.slot.unref()
		r.slot = nil
	}
	select {
	case out <- r:
		return true
	case <-ctx.Done():
		if r.slot != nil {
			r.slot.unref()
		}
		return false
	}
}

// failed returns the batch's error, if any.
func (bs *batchState) failed() error {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.err
}

// waveLimits bounds a wave: staging bytes, decoded bytes, jobs and copy
// ops.
type waveLimits struct {
	slab, arena int64
	jobs        int
	ops         int   // copy ops (0: no limit)
	elems       int64 // output elements (0: no limit); the block table's room, which one batch always fits
	opCost      int64 // staging bytes each copy op takes (its descriptor), 0 on the host engine
	readCap     int64 // largest coalesced read
	readGap     int64 // largest gap bridged when coalescing

	// How the engine splits Config.HostBufferBytes (hostBytes) into
	// slabs and DeviceBufferBytes (deviceBytes) into arenas: what a
	// budget error says to raise them to (hostNeed, deviceNeed).
	slabs, arenas          int64
	hostBytes, deviceBytes int64
}

// hostNeed is the Config.HostBufferBytes that gives a wave a slab of at
// least slab bytes: each of the slabs loses to alignment and reservations
// what it loses now. Rounded up to a MiB.
func (l waveLimits) hostNeed(slab int64) int64 {
	k := max(l.slabs, 1)
	return roundMiB(k * (slab + max(l.hostBytes/k-l.slab, 0)))
}

// deviceNeed is the Config.DeviceBufferBytes that gives a wave an arena
// of at least arena bytes, rounded up to a MiB.
func (l waveLimits) deviceNeed(arena int64) int64 {
	k := max(l.arenas, 1)
	return roundMiB(k * (arena + max(l.deviceBytes/k-l.arena, 0)))
}

func roundMiB(n int64) int64 { return (n + 1<<20 - 1) &^ (1<<20 - 1) }

// align rounds n up to a multiple of 256 (every placement in slabs and
// arenas is 256-aligned, more than any decoder or kernel needs).
func align(n int64) int64 { return (n + 255) &^ 255 }

// planBatch resolves a batch's samples into jobs and copies (plan.Batch:
// a chunk several samples need is one job), planning each array through
// loc(its source). route decides, per job, its decoder and costs. A
// sample that fails (unreadable metadata, wrong dtype) fails the batch
// with an error naming it.
func planBatch(m *metaCache, req *batchReq, maxChunk int64, loc func(*source) zarr.Locator, route func(*job)) (*batchPlan, error) {
	bp := &batchPlan{fills: make([]uint32, len(req.samples))}
	var zb plan.Batch[*source]
	for n, s := range req.samples {
		src, err := m.open(s.URI, s.Level)
		if err != nil {
			return nil, sampleError(req, n, err)
		}
		if src.arr.Rank() != len(s.Box) {
			return nil, sampleError(req, n, errorf("plan", ErrRank, s.URI, "box rank %d, array rank %d", len(s.Box), src.arr.Rank()))
		}
		zp, err := src.arr.Plan(s.Box, loc(src))
		if err != nil {
			return nil, sampleError(req, n, planError(src, err))
		}
		bp.fills[n] = src.fill
		for _, zj := range zb.Jobs[zb.Add(n, src, zp):] {
			c := zj.Chunk
			l := c.Codec.Layout()
			if maxChunk > 0 && int64(l.Bytes()) > maxChunk {
				return nil, sampleError(req, n, errorf("plan", ErrBudget, s.URI,
					"chunk %s@%d decodes to %d bytes, above Config.MaxChunkBytes = %d: raise it to at least %d, or set it to 0 (any chunk the buffers hold)", c.Key, c.Offset, l.Bytes(), maxChunk, l.Bytes()))
			}
			j := &job{src: src, chunk: c, layout: l, psrc: plan.Source(src.dtype, l)}
			route(j)
			bp.jobs = append(bp.jobs, j)
		}
	}
	bp.copies, bp.box = zb.Copies, zb.BoxBytes
	return bp, nil
}

// sampleError is err about sample n of req: a copy of its *Error (or an
// ErrInvalid one) with the sample's position, named in Op too.
func sampleError(req *batchReq, n int, err error) *Error {
	s, pos := req.samples[n], req.position(n)
	var e *Error
	if errors.As(err, &e) {
		c := *e
		e = &c
	} else {
		e = newError("plan", ErrInvalid, s.URI, err)
	}
	e.Op = fmt.Sprintf("%s (sample %d: %s)", e.Op, pos, s)
	e.Position = pos
	return e
}

// planError maps a planning failure (reading a shard index or an object
// size) onto the pipeline's kinds, naming the object at fault (Chunk)
// when the cause does.
func planError(src *source, err error) error {
	uri := src.uri
	var e *Error
	switch {
	case errors.Is(err, zarr.ErrChecksum), errors.Is(err, zarr.ErrCorrupt), errors.Is(err, zarr.ErrFormat):
		e = newError("plan", ErrDecode, uri, err)
	case errors.Is(err, zarr.ErrTooLarge):
		e = newError("plan", ErrBudget, uri, err)
	default:
		e = newError("plan", ErrStorage, uri, err)
	}
	var fe *zarr.FormatError
	var re *remote.Error
	bare, _, _ := strings.Cut(uri, "?")
	switch {
	case errors.As(err, &fe):
		e.inChunk(src.rel(fe.Key), 0, 0)
	case errors.As(err, &re):
		obj, _, _ := strings.Cut(re.URI, "?")
		if key, ok := strings.CutPrefix(obj, strings.TrimSuffix(bare, "/")+"/"); ok {
			e.inChunk(key, 0, 0)
		}
	}
	return e
}

// cutWaves orders the jobs by file and offset, packs them into waves under
// lim, coalesces each wave's reads, and gives every job its slab and arena
// offsets. Fill copies go to the first wave. A chunk cache hit joins a
// wave with its copy ops only. A job too big for an empty
// wave is an ErrBudget naming the chunk and the limit to raise. With carry
// (the previous batch's last wave, laid out), the first wave starts where
// carry ends and is carried, unless not even the batch's fills fit there.
func (bp *batchPlan) cutWaves(bs *batchState, lim waveLimits, carry *wave) error {
	order := make([]int, len(bp.jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := bp.jobs[a], bp.jobs[b]
		return cmp.Or(cmp.Compare(x.src.uri, y.src.uri), cmp.Compare(x.chunk.Key, y.chunk.Key), cmp.Compare(x.chunk.Offset, y.chunk.Offset))
	})
	uses := make([]int, len(bp.jobs))
	elems := make([]int64, len(bp.jobs))
	fills := 0
	var fillElems int64
	for _, c := range bp.copies {
		n := int64(1)
		for _, x := range c.Shape {
			n *= x
		}
		if c.Job >= 0 {
			uses[c.Job]++
			elems[c.Job] += n
		} else {
			fills++
			fillElems += n
		}
	}
	opsLim, elemsLim := lim.ops, lim.elems
	if opsLim == 0 {
		opsLim = math.MaxInt
	}
	if elemsLim == 0 {
		elemsLim = math.MaxInt64
	}
	if fills > opsLim {
		return errorf("plan", ErrBudget, "", "a batch needs %d fill ops, a wave takes %d", fills, opsLim)
	}
	if carry != nil && (carry.slab+int64(fills)*lim.opCost > lim.slab || carry.elems+fillElems > elemsLim) {
		carry = nil
	}
	newWave := func() *wave {
		w := &wave{batch: bs, index: len(bp.waves)}
		if w.index == 0 {
			w.ops = fills
			w.slab = int64(fills) * lim.opCost
			w.elems = fillElems
			if carry != nil {
				w.carried = true
				w.slabAt, w.arenaAt = carry.slabEnd, carry.arena
				w.slab += carry.slab
				w.arena = carry.arena
				w.elems += carry.elems
				w.prior = carry.prior + len(carry.jobs)
			}
		}
		bp.waves = append(bp.waves, w)
		return w
	}
	var w *wave
	for _, ji := range order {
		j := bp.jobs[ji]
		slab, arena := align(j.slabCost)+int64(uses[ji])*lim.opCost, align(j.arenaCost)
		if slab > lim.slab || (len(bp.waves) == 0 && carry == nil && slab+int64(fills)*lim.opCost > lim.slab) {
			return errorf("plan", ErrBudget, j.src.uri, "chunk %s@%d needs %d staging bytes, a wave has %d of Config.HostBufferBytes = %d: raise Config.HostBufferBytes to at least %d",
				j.chunk.Key, j.chunk.Offset, slab, lim.slab, lim.hostBytes, lim.hostNeed(slab+int64(fills)*lim.opCost))
		}
		if arena > lim.arena {
			return errorf("plan", ErrBudget, j.src.uri, "chunk %s@%d needs %d bytes of decode memory, a wave has %d of Config.DeviceBufferBytes = %d: raise Config.DeviceBufferBytes to at least %d",
				j.chunk.Key, j.chunk.Offset, arena, lim.arena, lim.deviceBytes, lim.deviceNeed(arena))
		}
		if uses[ji] > opsLim {
			return errorf("plan", ErrBudget, j.src.uri, "chunk %s@%d is used by %d copy ops, a wave takes %d", j.chunk.Key, j.chunk.Offset, uses[ji], opsLim)
		}
		fits := func(w *wave) bool {
			return w.slab+slab <= lim.slab && w.arena+arena <= lim.arena && (j.hit != nil || len(w.jobs)+w.prior < lim.jobs) &&
				w.ops+uses[ji] <= opsLim && w.elems+elems[ji] <= elemsLim
		}
		if w == nil || !fits(w) {
			w = newWave()
			if w.index == 0 && !fits(w) { // the fills, or the carried wave, crowd wave 0
				w = newWave()
			}
		}
		if j.hit != nil {
			w.hits = append(w.hits, ji)
		} else {
			w.jobs = append(w.jobs, ji)
		}
		w.slab += slab
		w.arena += arena
		w.ops += uses[ji]
		w.elems += elems[ji]
	}
	if len(bp.waves) == 0 { // nothing to read: all fill
		newWave()
	}
	if w0 := bp.waves[0]; w0.carried && len(w0.jobs)+len(w0.hits) == 0 && fills == 0 && len(bp.waves) > 1 {
		// Nothing of the batch fitted after carry.
		bp.waves = bp.waves[1:]
		for i, w := range bp.waves {
			w.index = i
		}
	}
	jobWave := make([]*wave, len(bp.jobs))
	for _, w := range bp.waves {
		for _, ji := range w.jobs {
			jobWave[ji] = w
		}
		for _, ji := range w.hits {
			jobWave[ji] = w
		}
	}
	for ci, c := range bp.copies {
		w := bp.waves[0]
		if c.Job >= 0 {
			w = jobWave[c.Job]
			bp.jobs[c.Job].waveUses++
		}
		w.copies = append(w.copies, ci)
	}
	for _, w := range bp.waves {
		w.layout(bp, lim)
	}
	bp.waves[len(bp.waves)-1].last = true
	return nil
}

// layout coalesces the wave's reads and places its jobs: stored bytes in
// the slab in read order, then the outputs of CPU-decoded jobs that travel
// in the slab (CUDA engine); decoded bytes of the others in the arena; all
// from slabAt and arenaAt. A gap between two reads is bridged only while
// the slab has room for it, and counts in w.slab. A chunk read in place
// (rawInPlace) joins the read before it only where it stays aligned to
// its elements: every read starts 256-aligned.
func (w *wave) layout(bp *batchPlan, lim waveLimits) {
	w.reads = w.reads[:0]
	slack := lim.slab - w.slab // w.slab is the sum of the jobs' costs here
	slab, arena := w.slabAt, w.arenaAt
	for _, ji := range w.jobs {
		j := bp.jobs[ji]
		c := j.chunk
		if n := len(w.reads); n > 0 {
			r := &w.reads[n-1]
			gap := c.Offset - (r.offset + r.length)
			end := align(r.slabOff + c.Offset + c.Length - r.offset)
			extra := end - align(r.slabOff+r.length) - align(c.Length)
			aligned := !j.rawInPlace || (c.Offset-r.offset)%int64(j.src.dtype.Size()) == 0
			if r.src == j.src && r.key == c.Key && gap >= 0 && gap <= lim.readGap &&
				c.Offset+c.Length-r.offset <= lim.readCap && extra <= slack && aligned {
				slack -= max(extra, 0)
				w.slab += max(extra, 0)
				r.length = c.Offset + c.Length - r.offset
				j.slabOff = r.slabOff + (c.Offset - r.offset)
				j.readOp = n - 1
				slab = end
				continue
			}
		}
		w.reads = append(w.reads, readOp{src: j.src, key: c.Key, offset: c.Offset, length: c.Length, slabOff: slab})
		j.slabOff = slab
		j.readOp = len(w.reads) - 1
		slab = align(slab + c.Length)
	}
	for _, ji := range w.jobs {
		j := bp.jobs[ji]
		if j.decInSlab {
			j.decOff = slab
			slab += align(int64(j.layout.Bytes()))
		} else {
			j.decOff = arena
			arena += align(j.arenaCost)
		}
	}
	w.slabEnd, w.arena = slab, arena
}
