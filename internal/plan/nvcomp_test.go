package plan

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// compressible returns n bytes of uint16-like data: smooth high bytes,
// low bytes from a few random runs, so every codec compresses every
// shuffled stream.
func compressible(n int) []byte {
	r := rand.New(rand.NewPCG(7, uint64(n)))
	b := make([]byte, n)
	for i := 0; i+1 < n; i += 2 {
		binary.LittleEndian.PutUint16(b[i:], uint16(i/512)<<8|uint16(i/64%4+r.IntN(2)*(i/16%2)))
	}
	return b
}

// decodeStream decodes one nvCOMP input on the CPU.
func decodeStream(t *testing.T, zs bool, in []byte, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	if zs {
		d, err := zstd.NewReader(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		got, err := d.DecodeAll(in, nil)
		if err != nil || len(got) != n {
			t.Fatalf("zstd stream: %d bytes, %v; want %d", len(got), err, n)
		}
		return got
	}
	if k, err := lz4.UncompressBlock(in, out); err != nil || k != n {
		t.Fatalf("lz4 stream: %d bytes, %v; want %d", k, err, n)
	}
	return out
}

// payloads returns the bytes of each stream of payload.
func payloads(payload []byte, streams []Stream) [][]byte {
	out := make([][]byte, len(streams))
	for i, s := range streams {
		out[i] = payload[s.Src : s.Src+s.Len]
	}
	return out
}

// TestNVCOMPStreams checks that the inputs NVCOMPStreams gives nvCOMP are
// the chunk's data: decoded and put at their places, the streams of a
// blosc chunk give its bytes before unshuffling, and a zstd or LZ4 chunk
// is one stream of its decoded bytes. Chunks nvCOMP must not take give
// none.
func TestNVCOMPStreams(t *testing.T) {
	const n = 256 << 10
	raw := compressible(n)

	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(false))
	zframe := enc.EncodeAll(raw, nil)
	streams, zs := NVCOMPStreams(zarr.CompressionZstd, zframe, n, nil)
	if len(streams) != 1 || !zs || streams[0].Size != n || !bytes.Equal(decodeStream(t, true, payloads(zframe, streams)[0], n), raw) {
		t.Fatalf("zstd chunk: zstd %v, %d streams", zs, len(streams))
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionZstd, zframe, n-1, nil); streams != nil {
		t.Fatal("zstd chunk of the wrong size accepted")
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionZstd, zframe, n, func(int) bool { return false }); streams != nil {
		t.Fatal("zstd chunk at a misaligned offset accepted")
	}

	blk := make([]byte, lz4.CompressBlockBound(n))
	k, err := lz4.CompressBlock(raw, blk, nil)
	if err != nil || k == 0 {
		t.Fatal(k, err)
	}
	lz := binary.LittleEndian.AppendUint32(nil, n)
	lz = append(lz, blk[:k]...)
	streams, zs = NVCOMPStreams(zarr.CompressionLZ4, lz, n, nil)
	if len(streams) != 1 || zs || !bytes.Equal(decodeStream(t, false, payloads(lz, streams)[0], n), raw) {
		t.Fatalf("lz4 chunk: zstd %v, %d streams", zs, len(streams))
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionLZ4, lz, n-1, nil); streams != nil {
		t.Fatal("lz4 chunk whose size prefix is not its size accepted")
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionLZ4, lz, n, func(off int) bool { return off != 4 }); streams != nil {
		t.Fatal("lz4 block at a misaligned offset accepted")
	}
	// A truncated block keeps its prefix: the rule passes it to the LZ4
	// walk on the GPU, which refuses it as nvcomp.LZ4GPUCheck does.
	cut := lz[:len(lz)-1]
	streams, _ = NVCOMPStreams(zarr.CompressionLZ4, cut, n, nil)
	if len(streams) != 1 || nvcomp.LZ4GPUCheck(payloads(cut, streams)[0], n) == nil {
		t.Fatal("a truncated lz4 block: not passed on, or passes the GPU check")
	}

	for _, c := range []struct {
		comp blosc.Compressor
		zstd bool
	}{{blosc.LZ4, false}, {blosc.Zstd, true}} {
		for _, sh := range []blosc.Shuffle{blosc.NoShuffle, blosc.ByteShuffle, blosc.BitShuffle} {
			frame, err := blosc.Encode(raw, blosc.Options{Compressor: c.comp, Level: 5, Shuffle: sh, Typesize: 2, Blocksize: 32 << 10})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, n)
			if k, err := blosc.DecodeNoUnshuffle(want, frame); err != nil || k != n {
				t.Fatal(k, err)
			}
			f, err := blosc.Parse(frame)
			if err != nil {
				t.Fatal(err)
			}
			streams, zs := NVCOMPStreams(zarr.CompressionBlosc, frame, n, nil)
			if zs != c.zstd || len(streams) != len(f.Streams) || len(streams) == 0 {
				t.Fatalf("blosc %v shuffle %v: zstd %v, %d streams of %d", c.comp, sh, zs, len(streams), len(f.Streams))
			}
			got := make([]byte, n)
			for i, s := range payloads(frame, streams) {
				copy(got[streams[i].Dst:], decodeStream(t, zs, s, streams[i].Size))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("blosc %v shuffle %v: the streams do not give the chunk's bytes", c.comp, sh)
			}
		}
	}
	memcpyed, err := blosc.Encode(raw, blosc.Options{Compressor: blosc.LZ4, Level: 0, Typesize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionBlosc, memcpyed, n, nil); streams != nil {
		t.Fatal("memcpyed blosc chunk accepted")
	}
	r := rand.New(rand.NewPCG(zarrtest.Seed(t), 0))
	noise := make([]byte, n)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	stored, err := blosc.Encode(noise, blosc.Options{Compressor: blosc.LZ4, Level: 5, Shuffle: blosc.ByteShuffle, Typesize: 2, Blocksize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionBlosc, stored, n, nil); streams != nil {
		t.Fatal("blosc chunk of incompressible data (raw streams) accepted")
	}
	if streams, _ := NVCOMPStreams(zarr.CompressionGzip, zframe, n, nil); streams != nil {
		t.Fatal("gzip chunk accepted")
	}
}
