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

// rawPiece is the most bytes of a raw blosc stream one entry of the
// blosclz kernel copies (one warp each): longer ones are cut.
const rawPiece = 64 << 10

// A Decoder is what decodes a chunk's streams on the GPU.
type Decoder int

const (
	Zstd     Decoder = iota // nvCOMP's zstd
	LZ4                     // nvCOMP's LZ4
	BloscLZ                 // the project's blosclz kernel (ptx.Kernels.BloscLZ), which also copies raw streams
	Decoders                // how many decoders there are
)

// GPUStreams is the rule that decides what the GPU decodes of a chunk:
// the streams of payload (the chunk's bytes past its checksums, of
// compression c, n bytes decoded) and their decoder, or nil when the GPU
// must not take the chunk:
//
//   - zstd: the frame, when nvcomp.ZstdGPUCompatible accepts it (one frame
//     stating its exact content size);
//   - LZ4: the block past numcodecs' 4-byte size prefix, which must say n;
//   - blosc: the streams of a frame of n bytes: compressed with zstd, LZ4
//     or LZ4HC (nvCOMP), without a raw stream, every zstd stream accepted
//     as a zstd chunk is; or with blosclz, or memcpyed (one raw stream),
//     for the blosclz kernel, which copies raw streams itself, cut into
//     pieces of up to rawPiece bytes. So an array whose incompressible
//     chunks c-blosc stored raw keeps the GPU for the others.
//
// aligned, when not nil, says whether an nvCOMP stream may start at offset
// off of the payload (the CUDA engine passes nvCOMP's input alignment in
// its staging slab); the blosclz kernel reads bytes at any offset. LZ4
// blocks are not walked here: the CUDA engine walks them on the GPU
// (ptx.LZ4Check, the twin of nvcomp.LZ4GPUCheck) just before nvCOMP
// decodes them, and decodes those it refuses on the CPU.
func GPUStreams(c zarr.Compression, payload []byte, n int, aligned func(off int) bool) ([]Stream, Decoder) {
	at := func(off int) bool { return aligned == nil || aligned(off) }
	switch c {
	case zarr.CompressionZstd:
		if at(0) && nvcomp.ZstdGPUCompatible(payload, n) {
			return []Stream{{Src: 0, Len: len(payload), Size: n}}, Zstd
		}
	case zarr.CompressionLZ4:
		if len(payload) > 4 && at(4) && binary.LittleEndian.Uint32(payload) == uint32(n) {
			return []Stream{{Src: 4, Len: len(payload) - 4, Size: n}}, LZ4
		}
	case zarr.CompressionBlosc:
		f, err := blosc.Parse(payload)
		if err != nil || f.Header.Nbytes != n || n == 0 {
			return nil, 0
		}
		dec := LZ4
		switch comp := f.Header.Compressor(); {
		case f.Header.Memcpyed() || comp == blosc.BloscLZ:
			dec = BloscLZ
		case comp == blosc.Zstd:
			dec = Zstd
		case comp != blosc.LZ4 && comp != blosc.LZ4HC:
			return nil, 0
		}
		streams := make([]Stream, 0, len(f.Streams))
		for _, st := range f.Streams {
			switch {
			case dec == BloscLZ && st.Raw:
				for o := 0; o < st.Size; o += rawPiece {
					k := min(rawPiece, st.Size-o)
					streams = append(streams, Stream{Src: st.Src + o, Len: k, Dst: st.Dst + o, Size: k})
				}
				continue
			case dec == BloscLZ:
			case st.Raw || !at(st.Src):
				return nil, 0
			case dec == Zstd && !nvcomp.ZstdGPUCompatible(payload[st.Src:st.Src+st.CSize], st.Size):
				return nil, 0
			}
			streams = append(streams, Stream{Src: st.Src, Len: st.CSize, Dst: st.Dst, Size: st.Size})
		}
		return streams, dec
	}
	return nil, 0
}
