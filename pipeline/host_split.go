package pipeline

import (
	"unsafe"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// A bigJob is a chunk of a wave whose decoding and assembly the host
// engine splits into tasks (see cpuSplit): decoding tasks first, then,
// once every chunk is decoded, assembly tasks.
type bigJob struct {
	j   *job
	ops []int32 // the ops that read it
	// fused: each decoding task assembles the elements it decoded, while
	// they are in its core's cache (fuse), instead of assembleTasks'
	// tasks reading them back once the whole chunk is decoded.
	fused bool
	// from is the chunk's bytes where they lie (a raw chunk read in
	// place), or nil: the chunk is decoded into its arena region (dec).
	from []byte
	dec  cpuDecode
}

// asmTask is one assembly task of a split chunk: elements
// [start, start+n) of op op of big job big.
type asmTask struct {
	big      int
	op       int32
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

// bigJob readies job j of wave w (stored: its stored bytes), whose ops
// are ops, to be split: read in place, or decoded into its arena region
// as splitDecode says.
func (h *hostEngine) bigJob(w *wave, j *job, ops []int32, stored []byte) (bigJob, error) {
	b := bigJob{j: j, ops: ops}
	var err error
	if b.from, err = h.inPlace(j, stored); b.from != nil || err != nil {
		return b, err
	}
	n := int64(j.layout.Bytes())
	// Capped: a decoder must not write past its chunk's room.
	b.dec, err = h.splitDecode(w, j, stored, h.arena[j.decOff:j.decOff+n:j.decOff+n+zarr.DecodeSlack])
	return b, err
}

// decodeTasks appends big job bi's decoding tasks to ts (none when it is
// read in place).
func (b *bigJob) decodeTasks(bi int, ts []decodeTask) []decodeTask {
	if b.from != nil {
		return ts
	}
	return b.dec.tasks(bi, ts)
}

// assembleTasks appends big job bi's assembly tasks to ts: each of its ops
// cut into ranges of about part bytes of source elements.
func (b *bigJob) assembleTasks(bi int, a *ptx.HostAssembly, part int64, ts []asmTask) []asmTask {
	per := max(1, part/int64(b.j.src.dtype.Size()))
	for _, op := range b.ops {
		elems := a.Elems(op)
		k := (elems + per - 1) / per
		for p := range k {
			start := elems * p / k
			ts = append(ts, asmTask{big: bi, op: op, start: start, n: elems*(p+1)/k - start})
		}
	}
	return ts
}

// fuse sets b.fused where its decoding tasks can assemble what they
// decode: the chunk is decoded by ranges of blosc blocks that hold whole
// elements, and every op that reads it numbers its elements in the
// chunk's order (HostAssembly.SrcRange), so that a range of blocks is a
// range of each op's elements.
func (b *bigJob) fuse(a *ptx.HostAssembly) {
	size := b.j.src.dtype.Size()
	if b.from != nil || b.dec.payload == nil || b.dec.blockSize%size != 0 {
		return
	}
	for _, op := range b.ops {
		if _, _, ok := a.SrcRange(op, 0, 0); !ok {
			return
		}
	}
	b.fused = true
}

// assemblePiece runs, for each op of fused big job b, the elements that
// decoding task t decoded (blocks [t.from, t.to) of its frame), on the
// calling goroutine with scratch sc.
func (b *bigJob) assemblePiece(a *ptx.HostAssembly, t decodeTask, sc *ptx.HostScratch) error {
	size, bs := int64(b.j.src.dtype.Size()), int64(b.dec.blockSize)
	lo, hi := int64(t.from)*bs/size, min(int64(t.to)*bs, int64(len(b.dec.dst)))/size
	for _, op := range b.ops {
		start, n, _ := a.SrcRange(op, lo, hi)
		if n == 0 {
			continue
		}
		if err := a.RunPart(op, start, n, b.j.decOff, nil, sc); err != nil {
			return assembleError(err)
		}
	}
	return nil
}
