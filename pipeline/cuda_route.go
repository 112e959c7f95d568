package pipeline

import (
	"fmt"
	"unsafe"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// nvEntry is one input of a GPU decoder (nvCOMP or the blosclz kernel): a
// whole zstd or LZ4 chunk, or one stream of a blosc chunk. in is the
// offset of its bytes in staging, out the offset of its output within the
// job's decoded bytes.
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

// entries returns the GPU decoder's inputs of a GPU job, and the decoder
// (nvCOMP's zstd or LZ4, or the blosclz kernel), or nil when the GPU must
// not take it: the streams plan.GPUStreams gives for the payload at poff
// in staging, each where nvCOMP's input alignment allows. LZ4 blocks are
// walked on the GPU (ptx.LZ4Check, the twin of nvcomp.LZ4GPUCheck), just
// before nvCOMP decodes them: on the host the walk costs nearly as much as
// decoding.
func (e *cudaEngine) entries(j *job, c zarr.Compression, payload []byte, poff int64) ([]nvEntry, plan.Decoder) {
	streams, dec := plan.GPUStreams(c, payload, j.layout.Bytes(), func(off int) bool { return (poff+int64(off))%e.inAlign == 0 })
	if streams == nil {
		return nil, 0
	}
	for _, st := range streams {
		if int64(st.Size) > e.nvMax {
			return nil, 0 // more than the decoders are sized for
		}
	}
	ents := make([]nvEntry, len(streams))
	for i, st := range streams {
		ents[i] = nvEntry{job: j, in: poff + int64(st.Src), inLen: int64(st.Len), out: int64(st.Dst), size: int64(st.Size)}
	}
	if c == zarr.CompressionBlosc {
		h, _ := blosc.ParseHeader(payload) // GPUStreams parsed the frame
		setShuffle(&j.psrc, h)
	}
	return ents, dec
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

// route decides, at plan time, which decoder a chunk gets and what it
// costs. Chunks the GPU may take (by codec, nvCOMP loaded; arrays where a
// chunk was already refused stay on the CPU) get arena space. CPU-decoded
// chunks get staging room for their decoded bytes, which travel in the
// same H2D copy.
//
// The CPU takes no share of what nvCOMP may take: its decoding would lie
// on the way to the wave's copy, and its occasional stalls left the GPU
// idle (cmd/damacy/BENCH.md, "no CPU share of nvCOMP's chunks").
//
// A zstd or LZ4 chunk larger than an nvCOMP entry may be (nvMax) stays on
// the CPU; a blosc chunk's streams are checked when its header is read
// (entries).
//
// A raw chunk stored as its decoded bytes alone (no checksum) is read in
// place (rawInPlace): it gets no room for a decoded copy, which would
// take as much staging as the chunk and cross to the GPU unused.
func (e *cudaEngine) route(j *job) {
	n := int64(j.layout.Bytes())
	r := j.chunk.Codec.Route()
	if r.Simple && r.Compression == zarr.CompressionNone && j.chunk.Length == n {
		j.rawInPlace = true
		j.slabCost = n
		return
	}
	j.gpu = e.zstd != nil && r.Simple && !j.src.cpuOnly.Load() &&
		(r.Compression == zarr.CompressionBlosc ||
			(n <= e.nvMax && (r.Compression == zarr.CompressionZstd || r.Compression == zarr.CompressionLZ4)))
	if j.gpu {
		j.slabCost = j.chunk.Length + int64(descEntries(j))*(jobDescBytes+statusBytes)
		j.arenaCost = n
		return
	}
	j.decInSlab = true
	j.slabCost = j.chunk.Length + align(n)
}

// chunkCheck is how one chunk of a loaded wave is decoded: read in place
// (raw bytes at poff in the slab), on the GPU (ents, by dec), or else on
// the CPU.
type chunkCheck struct {
	inPlace bool
	poff    int64
	ents    []nvEntry
	dec     plan.Decoder
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
// zstd, LZ4 or blosc (lz4, zstd or blosclz streams) chunk routed to the
// GPU that passes plan.GPUStreams's checks becomes entries of its GPU
// decoder; the others go to the CPU.
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
	if j.rawInPlace {
		// Planned without room for a decoded copy, and aligned by the
		// plan (wave.layout): only a chain whose checksums leave other
		// than the chunk's bytes gets here.
		return c, decodeError(j, fmt.Errorf("%w: %d bytes after the checksums, the chunk has %d", zarr.ErrCorrupt, len(c.payload), n))
	}
	if j.gpu {
		c.ents, c.dec = e.entries(j, r.Compression, c.payload, c.poff)
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
