package main

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
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

// TestNVCOMPStreams checks that the inputs the nvCOMP ceiling times are
// the chunk's data: decoded and put at their places, the streams of a
// blosc chunk give its bytes before unshuffling, and a zstd or LZ4 chunk
// is one stream of its decoded bytes. Chunks the CUDA engine keeps on the
// CPU give none.
func TestNVCOMPStreams(t *testing.T) {
	const n = 256 << 10
	raw := compressible(n)

	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(false))
	zframe := enc.EncodeAll(raw, nil)
	streams, sizes, zs, ok := nvcompStreams(zarr.CompressionZstd, zframe, n)
	if !ok || !zs || len(streams) != 1 || sizes[0] != n || !bytes.Equal(decodeStream(t, true, streams[0], n), raw) {
		t.Fatalf("zstd chunk: ok %v zstd %v, %d streams", ok, zs, len(streams))
	}
	if _, _, _, ok := nvcompStreams(zarr.CompressionZstd, zframe, n-1); ok {
		t.Fatal("zstd chunk of the wrong size accepted")
	}

	blk := make([]byte, lz4.CompressBlockBound(n))
	k, err := lz4.CompressBlock(raw, blk, nil)
	if err != nil || k == 0 {
		t.Fatal(k, err)
	}
	lz := binary.LittleEndian.AppendUint32(nil, n)
	lz = append(lz, blk[:k]...)
	streams, _, zs, ok = nvcompStreams(zarr.CompressionLZ4, lz, n)
	if !ok || zs || len(streams) != 1 || !bytes.Equal(decodeStream(t, false, streams[0], n), raw) {
		t.Fatalf("lz4 chunk: ok %v zstd %v, %d streams", ok, zs, len(streams))
	}
	if _, _, _, ok := nvcompStreams(zarr.CompressionLZ4, lz[:len(lz)-1], n); ok {
		t.Fatal("truncated lz4 chunk accepted")
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
			streams, sizes, zs, ok := nvcompStreams(zarr.CompressionBlosc, frame, n)
			if !ok || zs != c.zstd || len(streams) != len(f.Streams) {
				t.Fatalf("blosc %v shuffle %v: ok %v zstd %v, %d streams of %d", c.comp, sh, ok, zs, len(streams), len(f.Streams))
			}
			got := make([]byte, n)
			for i, s := range streams {
				copy(got[f.Streams[i].Dst:], decodeStream(t, zs, s, sizes[i]))
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
	if _, _, _, ok := nvcompStreams(zarr.CompressionBlosc, memcpyed, n); ok {
		t.Fatal("memcpyed blosc chunk accepted")
	}
	noise := make([]byte, n)
	for i := range noise {
		noise[i] = byte(rand.Uint32())
	}
	stored, err := blosc.Encode(noise, blosc.Options{Compressor: blosc.LZ4, Level: 5, Shuffle: blosc.ByteShuffle, Typesize: 2, Blocksize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := nvcompStreams(zarr.CompressionBlosc, stored, n); ok {
		t.Fatal("blosc chunk of incompressible data (raw streams) accepted")
	}
	if _, _, _, ok := nvcompStreams(zarr.CompressionGzip, zframe, n); ok {
		t.Fatal("gzip chunk accepted")
	}
}
