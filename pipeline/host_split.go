package pipeline

import (
	"unsafe"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// A large chunk is split into several CPU tasks by the host engine, so
// that a wave of few large chunks keeps every core busy: its blosc blocks
// are decoded by ranges, and the ops that read it by ranges of their
// elements.
const (
	// hostSplitBytes is the decoded size above which a chunk is split.
	hostSplitBytes = 4 << 20
	// hostPartBytes is about how many decoded bytes one task of a split
	// chunk decodes, or its ops read.
	hostPartBytes = 1 << 20
)

// hostSplit is how the host engine splits large chunks: hostSplitBytes
// and hostPartBytes, which tests lower to split small chunks.
type hostSplit struct {
	min  int64 // a chunk decoding to more bytes than this is split
	part int64 // about how many decoded bytes each task takes
}

// A bigJob is a chunk of a wave whose decoding and assembly are split
// into tasks: decoding tasks first, then, once every chunk is decoded,
// assembly tasks.
type bigJob struct {
	j   *job
	ops []int32 // the ops that read it
	// from is the chunk's bytes where they lie (a raw chunk read in
	// place), or nil: the chunk is decoded into its arena region.
	from []byte
	// payload is a blosc chunk's frame, decoded a range of blocks per
	// task (nblocks blocks, step per task); nil: one task decodes the
	// whole chunk (none when from is set).
	payload       []byte
	nblocks, step int
}

// hostTask is one task of a split chunk: blocks [from, to) of big job
// big's blosc frame (from < 0: the whole chunk), or elements
// [start, start+n) of its op op.
type hostTask struct {
	big      int
	op       int32
	from, to int
	start, n int64
}

// inPlace returns the bytes of job j's raw chunk where they lie (stored:
// its stored bytes, checksums verified and stripped), for its ops to read
// instead of a decoded copy; nil when they cannot: the chunk is
// compressed, headed for the chunk cache, larger than the decoder takes,
// not of its decoded size (decoding reports it) or not aligned to its
// elements.
func (h *hostEngine) inPlace(j *job, stored []byte) ([]byte, error) {
	r := j.chunk.Codec.Route()
	n := int64(j.layout.Bytes())
	if !r.Simple || r.Compression != zarr.CompressionNone || (h.chunks != nil && j.cacheKey != nil) || n > h.cfg.chunkLimit() {
		return nil, nil
	}
	payload, err := j.chunk.Payload(stored)
	if err != nil {
		return nil, decodeError(j, err)
	}
	if int64(len(payload)) != n || n == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(payload)))%uintptr(j.src.dtype.Size()) != 0 {
		return nil, nil
	}
	return payload, nil
}

// bigJob readies job j (stored: its stored bytes), whose ops are ops, to
// be split: read in place, decoded by ranges of blosc blocks, or decoded
// whole by one task.
func (h *hostEngine) bigJob(j *job, ops []int32, stored []byte) (bigJob, error) {
	b := bigJob{j: j, ops: ops}
	if int64(j.layout.Bytes()) > h.cfg.chunkLimit() {
		return b, nil // decoding reports it
	}
	var err error
	if b.from, err = h.inPlace(j, stored); b.from != nil || err != nil {
		return b, err
	}
	r := j.chunk.Codec.Route()
	if !r.Simple || r.Compression != zarr.CompressionBlosc {
		return b, nil
	}
	payload, err := j.chunk.Payload(stored)
	if err != nil {
		return b, decodeError(j, err)
	}
	// A frame that does not decode to the chunk's size is decoded whole,
	// which reports it.
	bh, err := blosc.ParseHeader(payload)
	if err != nil || int64(bh.Nbytes) != int64(j.layout.Bytes()) || bh.Blocks() < 2 {
		return b, nil
	}
	b.payload, b.nblocks = payload, bh.Blocks()
	b.step = int(max(1, h.split.part/int64(bh.Blocksize)))
	return b, nil
}

// decodeTasks appends big job bi's decoding tasks to ts.
func (b *bigJob) decodeTasks(bi int, ts []hostTask) []hostTask {
	switch {
	case b.from != nil:
	case b.payload == nil:
		ts = append(ts, hostTask{big: bi, from: -1})
	default:
		for at := 0; at < b.nblocks; at += b.step {
			ts = append(ts, hostTask{big: bi, from: at, to: min(at+b.step, b.nblocks)})
		}
	}
	return ts
}

// assembleTasks appends big job bi's assembly tasks to ts: each of its ops
// cut into ranges of about part bytes of source elements.
func (b *bigJob) assembleTasks(bi int, a *ptx.HostAssembly, part int64, ts []hostTask) []hostTask {
	per := max(1, part/int64(b.j.src.dtype.Size()))
	for _, op := range b.ops {
		elems := a.Elems(op)
		k := (elems + per - 1) / per
		for p := range k {
			start := elems * p / k
			ts = append(ts, hostTask{big: bi, op: op, start: start, n: elems*(p+1)/k - start})
		}
	}
	return ts
}

// decodeBig runs decoding task t of big job b, whose stored bytes are
// stored, into its arena region.
func (h *hostEngine) decodeBig(b *bigJob, t hostTask, stored []byte) error {
	j := b.j
	n := int64(j.layout.Bytes())
	// Capped: a decoder must not write past its chunk's room.
	dst := h.arena[j.decOff : j.decOff+n : j.decOff+n+zarr.DecodeSlack]
	var err error
	if t.from < 0 {
		err = h.decodeJob(j, stored, dst, j.bloscPayload)
	} else {
		err = blosc.DecodeBlocks(dst, b.payload, t.from, t.to)
	}
	if err != nil {
		return decodeError(j, err)
	}
	return nil
}
