package blosc

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// benchData is 256 KiB of measured-looking data: "u16" a smooth 2-D field
// plus noise of 0..47 (about 5.6 noisy bits), "f32" a smooth field plus
// Gaussian noise of sigma 0.01; or the public zarr benchmark's values.
func benchData(kind string) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 256 << 10
	b := make([]byte, n)
	switch kind {
	case "u16":
		for i := range n / 2 {
			x, y := float64(i%512), float64(i/512)
			v := 20000 + 8000*math.Sin(x/40)*math.Cos(y/30) + float64(rng.IntN(48))
			binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
		}
	case "zarrbench": // 4 MiB: 32 planes of 256x256 of the public zarr benchmark's values, (x + y²/32 + z³) mod 65536
		b = make([]byte, 4<<20)
		for i := range len(b) / 2 {
			z, y, x := i/65536+300, i/256%256, i%256
			binary.LittleEndian.PutUint16(b[2*i:], uint16(x+y*y/32+z*z*z))
		}
	case "zarrbench-32": // 64 KiB: a 32^3 chunk of it
		b = make([]byte, 64<<10)
		for i := range len(b) / 2 {
			z, y, x := i/1024+300, i/32%32+64, i%32+96
			binary.LittleEndian.PutUint16(b[2*i:], uint16(x+y*y/32+z*z*z))
		}
	case "f32":
		for i := range n / 4 {
			x, y := float64(i%256), float64(i/256)
			v := math.Sin(x/40)*math.Cos(y/30) + 0.01*rng.NormFloat64()
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
	}
	return b
}

// BenchmarkDecode measures Decode of one 256 KiB chunk on one goroutine;
// MB/s counts output bytes. Run with -cpu 1 for single-core numbers.
func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name string
		data string
		o    Options
	}{
		{"lz4-shuffle-u16", "u16", Options{Compressor: LZ4, Level: 5, Shuffle: ByteShuffle, Typesize: 2}},
		{"lz4-shuffle-f32", "f32", Options{Compressor: LZ4, Level: 5, Shuffle: ByteShuffle, Typesize: 4}},
		{"zstd-bitshuffle-u16", "u16", Options{Compressor: Zstd, Level: 5, Shuffle: BitShuffle, Typesize: 2}},
		{"zstd-bitshuffle-f32", "f32", Options{Compressor: Zstd, Level: 5, Shuffle: BitShuffle, Typesize: 4}},
		{"zstd-shuffle-u16", "u16", Options{Compressor: Zstd, Level: 5, Shuffle: ByteShuffle, Typesize: 2}},
		{"blosclz-shuffle-u16", "u16", Options{Compressor: BloscLZ, Level: 5, Shuffle: ByteShuffle, Typesize: 2}},
		{"zlib-shuffle-u16", "u16", Options{Compressor: Zlib, Level: 5, Shuffle: ByteShuffle, Typesize: 2}},
		{"snappy-shuffle-u16", "u16", Options{Compressor: Snappy, Level: 5, Shuffle: ByteShuffle, Typesize: 2}},
		// The public zarr benchmark's codec (blosclz 9, bit shuffle) on
		// its values: 512 KiB blocks of a 256^3 chunk, and a 32^3 chunk.
		{"blosclz-bitshuffle-zarrbench", "zarrbench", Options{Compressor: BloscLZ, Level: 9, Shuffle: BitShuffle, Typesize: 2}},
		{"blosclz-bitshuffle-zarrbench-32", "zarrbench-32", Options{Compressor: BloscLZ, Level: 9, Shuffle: BitShuffle, Typesize: 2}},
		{"blosclz-noshuffle-zarrbench", "zarrbench", Options{Compressor: BloscLZ, Level: 9, Typesize: 2}},
		{"blosclz-shuffle-zarrbench", "zarrbench", Options{Compressor: BloscLZ, Level: 9, Shuffle: ByteShuffle, Typesize: 2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			raw := benchData(bc.data)
			chunk, err := Encode(raw, bc.o)
			if err != nil {
				b.Fatal(err)
			}
			d, err := NewDecoder()
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			dst := make([]byte, len(raw))
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := d.Decode(dst, chunk); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(raw))/float64(len(chunk)), "ratio")
		})
	}
}

// BenchmarkUnshuffle measures the unshuffles alone on a 256 KiB block.
func BenchmarkUnshuffle(b *testing.B) {
	src := benchData("u16")
	dst := make([]byte, len(src))
	for _, ts := range []int{2, 4, 8, 3} {
		b.Run("byte-"+string(rune('0'+ts)), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				unshuffleBlock(dst, src, ts)
			}
		})
		b.Run("bit-"+string(rune('0'+ts)), func(b *testing.B) {
			scratch := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				bitUnshuffleBlock(dst, src, scratch, ts)
			}
		})
		b.Run("bit-former-"+string(rune('0'+ts)), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				bitUnshuffleRef(dst, src, ts)
			}
		})
	}
}
