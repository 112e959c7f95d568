package plan

import (
	"encoding/binary"

	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// Stream is one input nvCOMP decodes: Len bytes at Src of a chunk's
// payload, which decode to Size bytes at Dst of the chunk's decoded bytes.
type Stream struct {
	Src, Len  int
	Dst, Size int
}

// NVCOMPStreams is the rule that decides what nvCOMP receives of a chunk:
// the streams of payload (the chunk's bytes past its checksums, of
// compression c, n bytes decoded) and whether they are zstd (else LZ4), or
// nil when nvCOMP must not take the chunk:
//
//   - zstd: the frame, when nvcomp.ZstdGPUCompatible accepts it (one frame
//     stating its exact content size);
//   - LZ4: the block past numcodecs' 4-byte size prefix, which must say n;
//   - blosc: the streams of a frame of n bytes compressed with zstd, LZ4 or
//     LZ4HC, not memcpyed and without a raw stream, every zstd stream
//     accepted as a zstd chunk is.
//
// aligned, when not nil, says whether a stream may start at offset off of
// the payload (the CUDA engine passes nvCOMP's input alignment in its
// staging slab). LZ4 blocks are not walked here: the CUDA engine walks
// them on the GPU (ptx.LZ4Check, the twin of nvcomp.LZ4GPUCheck) just
// before nvCOMP decodes them, and decodes those it refuses on the CPU.
func NVCOMPStreams(c zarr.Compression, payload []byte, n int, aligned func(off int) bool) (streams []Stream, zstd bool) {
	at := func(off int) bool { return aligned == nil || aligned(off) }
	switch c {
	case zarr.CompressionZstd:
		if at(0) && nvcomp.ZstdGPUCompatible(payload, n) {
			return []Stream{{Src: 0, Len: len(payload), Size: n}}, true
		}
	case zarr.CompressionLZ4:
		if len(payload) > 4 && at(4) && binary.LittleEndian.Uint32(payload) == uint32(n) {
			return []Stream{{Src: 4, Len: len(payload) - 4, Size: n}}, false
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
		streams := make([]Stream, 0, len(f.Streams))
		for _, st := range f.Streams {
			if st.Raw || !at(st.Src) {
				return nil, false
			}
			if zs && !nvcomp.ZstdGPUCompatible(payload[st.Src:st.Src+st.CSize], st.Size) {
				return nil, false
			}
			streams = append(streams, Stream{Src: st.Src, Len: st.CSize, Dst: st.Dst, Size: st.Size})
		}
		return streams, zs
	}
	return nil, false
}
