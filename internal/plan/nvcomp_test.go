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

// decodeStream decodes one GPU decoder's input on the CPU.
func decodeStream(t *testing.T, dec Decoder, in []byte, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	switch {
	case dec == BloscLZ:
		// A raw stream is copied; blosc's decoder does that too.
		if k, err := blosc.DecodeNoUnshuffle(out, zarrtest.BloscLZStream(in, n)); err != nil || k != n {
			t.Fatalf("blosclz stream: %d bytes, %v; want %d", k, err, n)
		}
		return out
	case dec == Zstd:
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

// TestGPUStreams checks that the inputs GPUStreams gives the GPU's
// decoders are the chunk's data: decoded and put at their places, the
// streams of a blosc chunk give its bytes before unshuffling, and a zstd
// or LZ4 chunk is one stream of its decoded bytes. Chunks the GPU must not
// take give none.
func TestGPUStreams(t *testing.T) {
	const n = 256 << 10
	raw := compressible(n)

	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(false))
	zframe := enc.EncodeAll(raw, nil)
	streams, dec := GPUStreams(zarr.CompressionZstd, zframe, n, nil)
	if len(streams) != 1 || dec != Zstd || streams[0].Size != n || !bytes.Equal(decodeStream(t, dec, payloads(zframe, streams)[0], n), raw) {
		t.Fatalf("zstd chunk: decoder %v, %d streams", dec, len(streams))
	}
	if streams, _ := GPUStreams(zarr.CompressionZstd, zframe, n-1, nil); streams != nil {
		t.Fatal("zstd chunk of the wrong size accepted")
	}
	if streams, _ := GPUStreams(zarr.CompressionZstd, zframe, n, func(int) bool { return false }); streams != nil {
		t.Fatal("zstd chunk at a misaligned offset accepted")
	}

	blk := make([]byte, lz4.CompressBlockBound(n))
	k, err := lz4.CompressBlock(raw, blk, nil)
	if err != nil || k == 0 {
		t.Fatal(k, err)
	}
	lz := binary.LittleEndian.AppendUint32(nil, n)
	lz = append(lz, blk[:k]...)
	streams, dec = GPUStreams(zarr.CompressionLZ4, lz, n, nil)
	if len(streams) != 1 || dec != LZ4 || !bytes.Equal(decodeStream(t, dec, payloads(lz, streams)[0], n), raw) {
		t.Fatalf("lz4 chunk: decoder %v, %d streams", dec, len(streams))
	}
	if streams, _ := GPUStreams(zarr.CompressionLZ4, lz, n-1, nil); streams != nil {
		t.Fatal("lz4 chunk whose size prefix is not its size accepted")
	}
	if streams, _ := GPUStreams(zarr.CompressionLZ4, lz, n, func(off int) bool { return off != 4 }); streams != nil {
		t.Fatal("lz4 block at a misaligned offset accepted")
	}
	// A truncated block keeps its prefix: the rule passes it to the LZ4
	// walk on the GPU, which refuses it as nvcomp.LZ4GPUCheck does.
	cut := lz[:len(lz)-1]
	streams, _ = GPUStreams(zarr.CompressionLZ4, cut, n, nil)
	if len(streams) != 1 || nvcomp.LZ4GPUCheck(payloads(cut, streams)[0], n) == nil {
		t.Fatal("a truncated lz4 block: not passed on, or passes the GPU check")
	}

	r := rand.New(rand.NewPCG(zarrtest.Seed(t), 0))
	noise := make([]byte, n)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	for _, c := range []struct {
		comp blosc.Compressor
		dec  Decoder
	}{{blosc.LZ4, LZ4}, {blosc.LZ4HC, LZ4}, {blosc.Zstd, Zstd}, {blosc.BloscLZ, BloscLZ}} {
		for _, sh := range []blosc.Shuffle{blosc.NoShuffle, blosc.ByteShuffle, blosc.BitShuffle} {
			data := raw
			if c.dec == BloscLZ && sh == blosc.ByteShuffle {
				// Half noise: its streams are stored raw, which the
				// kernel copies (all noise would be memcpyed).
				data = append(bytes.Clone(noise[:n/2]), raw[n/2:]...)
			}
			frame, err := blosc.Encode(data, blosc.Options{Compressor: c.comp, Level: 5, Shuffle: sh, Typesize: 2, Blocksize: 32 << 10})
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
			// Misaligned streams are nvCOMP's concern, not the kernel's.
			aligned := func(off int) bool { return c.dec != BloscLZ || off%8 == 0 }
			streams, dec := GPUStreams(zarr.CompressionBlosc, frame, n, aligned)
			if dec != c.dec || len(streams) != len(f.Streams) || len(streams) == 0 {
				t.Fatalf("blosc %v shuffle %v: decoder %v, %d streams of %d", c.comp, sh, dec, len(streams), len(f.Streams))
			}
			got := make([]byte, n)
			raws := 0
			for i, s := range payloads(frame, streams) {
				copy(got[streams[i].Dst:], decodeStream(t, dec, s, streams[i].Size))
				if len(s) == streams[i].Size {
					raws++
				}
			}
			if (raws > 0) != (&data[0] != &raw[0]) {
				t.Fatalf("blosc %v shuffle %v: %d raw streams", c.comp, sh, raws)
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
	// A memcpyed chunk: raw streams the blosclz kernel copies, in pieces.
	streams, dec = GPUStreams(zarr.CompressionBlosc, memcpyed, n, nil)
	if dec != BloscLZ || len(streams) != n/rawPiece {
		t.Fatalf("memcpyed blosc chunk: decoder %v, %d streams", dec, len(streams))
	}
	got := make([]byte, n)
	for i, s := range payloads(memcpyed, streams) {
		if len(s) != streams[i].Size {
			t.Fatalf("memcpyed chunk: stream %d of %d bytes for %d", i, len(s), streams[i].Size)
		}
		copy(got[streams[i].Dst:], decodeStream(t, dec, s, streams[i].Size))
	}
	if !bytes.Equal(got, raw) {
		t.Fatal("memcpyed chunk: the streams do not give its bytes")
	}
	// Half noise: an LZ4 frame with raw streams (all noise would be
	// memcpyed), which nvCOMP must not take.
	half := append(bytes.Clone(noise[:n/2]), raw[n/2:]...)
	stored, err := blosc.Encode(half, blosc.Options{Compressor: blosc.LZ4, Level: 5, Shuffle: blosc.ByteShuffle, Typesize: 2, Blocksize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := blosc.Parse(stored); err != nil || f.Header.Memcpyed() {
		t.Fatalf("half-noise chunk: %v, memcpyed", err)
	}
	if streams, _ := GPUStreams(zarr.CompressionBlosc, stored, n, nil); streams != nil {
		t.Fatal("blosc LZ4 chunk with raw streams accepted")
	}
	if streams, _ := GPUStreams(zarr.CompressionGzip, zframe, n, nil); streams != nil {
		t.Fatal("gzip chunk accepted")
	}
}
