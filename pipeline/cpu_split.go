package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// A large chunk is split into several CPU tasks by both engines, so that
// a wave of few large chunks keeps every core busy: its blosc blocks are
// decoded by ranges (blosc's blocks are independent), and on the host
// engine the ops that read it by ranges of their elements.
const (
	// cpuSplitBytes is the decoded size above which a chunk is split.
	cpuSplitBytes = 4 << 20
	// cpuPartBytes is about how many decoded bytes one task of a split
	// chunk decodes, or its ops read.
	cpuPartBytes = 1 << 20
)

// cpuSplit is how the engines split large chunks: cpuSplitBytes and
// cpuPartBytes, which tests lower to split small chunks.
type cpuSplit struct {
	min  int64 // a chunk decoding to more bytes than this is split
	part int64 // about how many decoded bytes each task takes
}

// A cpuDecode is a chunk the CPU workers decode into dst: whole, by one
// task, or by ranges of its blosc blocks, a task each.
type cpuDecode struct {
	j      *job
	w      *wave  // the wave that read it: its guard covers mapped bytes
	stored []byte // its stored bytes
	dst    []byte // where its decoded bytes go, capped as its decoder needs
	// payload is a blosc chunk's frame, decoded a range of blocks per
	// task (nblocks blocks, step per task); nil: one task decodes the
	// whole chunk.
	payload       []byte
	nblocks, step int
	blockSize     int // the frame's block size (decoded bytes per block)
}

// decodeTask is one CPU task of a cpuDecode: blocks [from, to) of its
// blosc frame, or the whole chunk (from < 0).
type decodeTask struct {
	chunk    int // the cpuDecode's index
	from, to int
}

// splitDecode returns the decoding of job j of wave w (stored: its stored
// bytes) into dst: split by ranges of blocks when the chunk decodes to
// more than s.split.min bytes and is a blosc frame of several blocks that
// decodes to the chunk's size, else whole. The frame is j.bloscPayload
// when set (the CUDA engine's, decoded without its unshuffle, which the
// gather undoes), else the chunk's payload, unshuffled as it decodes. A
// chunk above the decoders' limit, or whose frame is not as its header
// says, is decoded whole, which reports it.
func (s *stages) splitDecode(w *wave, j *job, stored, dst []byte) (cpuDecode, error) {
	d := cpuDecode{j: j, w: w, stored: stored, dst: dst}
	n := int64(j.layout.Bytes())
	if n <= s.split.min || n > s.cfg.chunkLimit() {
		return d, nil
	}
	payload := j.bloscPayload
	if payload == nil {
		r := j.chunk.Codec.Route()
		if !r.Simple || r.Compression != zarr.CompressionBlosc {
			return d, nil
		}
		var err error
		if payload, err = j.chunk.Payload(stored); err != nil {
			return d, decodeError(j, err)
		}
	}
	h, err := blosc.ParseHeader(payload)
	if err != nil || int64(h.Nbytes) != n || h.Blocks() < 2 {
		return d, nil
	}
	d.payload, d.nblocks, d.blockSize = payload, h.Blocks(), h.Blocksize
	d.step = int(max(1, s.split.part/int64(h.Blocksize)))
	return d, nil
}

// tasks appends the decoding tasks of d, the di-th decode, to ts.
func (d *cpuDecode) tasks(di int, ts []decodeTask) []decodeTask {
	if d.payload == nil {
		return append(ts, decodeTask{chunk: di, from: -1})
	}
	for at := 0; at < d.nblocks; at += d.step {
		ts = append(ts, decodeTask{chunk: di, from: at, to: min(at+d.step, d.nblocks)})
	}
	return ts
}

// decodePiece runs task t of d on the calling goroutine.
func (s *stages) decodePiece(d *cpuDecode, t decodeTask) error {
	j := d.j
	var err error
	switch {
	case t.from < 0:
		err = s.decodeJob(j, d.stored, d.dst, j.bloscPayload)
	case j.bloscPayload != nil:
		err = blosc.DecodeBlocksNoUnshuffle(d.dst, d.payload, t.from, t.to)
	default:
		err = blosc.DecodeBlocks(d.dst, d.payload, t.from, t.to)
	}
	if err != nil {
		return decodeError(j, err)
	}
	return nil
}

// decodeAll decodes ds on the CPU workers, every task of them in one Run
// (a split chunk's ranges beside the other chunks), so that the chunks of
// every part of a wave keep the workers busy together; w's batch and wave
// name the workers' trace spans. It returns each decode's error (nil: it
// decoded; of several, its first task's) and the Run's own: ctx's.
func (s *stages) decodeAll(ctx context.Context, w *wave, ds []cpuDecode) ([]error, error) {
	errs := make([]error, len(ds))
	if len(ds) == 0 {
		return errs, nil
	}
	var ts []decodeTask
	var in, out int64
	for i := range ds {
		ts = ds[i].tasks(i, ts)
		in += ds[i].j.chunk.Length
		out += int64(len(ds[i].dst))
	}
	errAt := make([]int, len(ds)) // the task that gave errs[i]
	var mu sync.Mutex
	t0 := time.Now()
	err := s.cpu.Run(ctx, len(ts), func(i int) error {
		t := ts[i]
		d := &ds[t.chunk]
		if err := d.w.guard(func() error { return s.decodePiece(d, t) }); err != nil {
			mu.Lock()
			if errs[t.chunk] == nil || i < errAt[t.chunk] {
				errs[t.chunk], errAt[t.chunk] = err, i
			}
			mu.Unlock()
		}
		return nil
	}, s.trace.workers("decode", "cpu", w, out))
	s.stats.update(func(st *Stats) {
		st.Decompress.add(time.Since(t0), in, out)
		st.ChunksDecoded += int64(len(ds))
	})
	return errs, err
}
