package blosc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr/zarrtest"
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

// cbloscZarrbenchPy writes the zarr benchmark's data (benchData's
// "zarrbench" and "zarrbench-32") as numcodecs' c-blosc compresses it
// (blosclz 9, bit shuffle), one frame per file, and prints c-blosc's own
// single-threaded decode rate of each in MB/s.
const cbloscZarrbenchPy = `
import sys, time
import numpy as np
from numcodecs import Blosc, blosc
blosc.set_nthreads(1)
out = sys.argv[1]
z = np.arange(32)[:, None, None] + 300
y = np.arange(256)[None, :, None]
x = np.arange(256)[None, None, :]
big = ((x + y * y // 32 + z**3) % 65536).astype("<u2")
small = np.ascontiguousarray(((x[:, :, 96:128] + y[:, 64:96] ** 2 // 32 + z**3) % 65536).astype("<u2"))
codec = Blosc(cname="blosclz", clevel=9, shuffle=Blosc.BITSHUFFLE, blocksize=0)
for name, a in (("zarrbench", big), ("zarrbench-32", small)):
    frame = codec.encode(a)
    open("%s/%s.blosc" % (out, name), "wb").write(frame)
    dst = np.empty_like(a)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(20):
            codec.decode(frame, out=dst)
        best = min(best, (time.perf_counter() - t) / 20)
    print(name, a.nbytes / best / 1e6)
`

// BenchmarkDecodeCBlosc decodes the frames c-blosc (through numcodecs)
// writes for the zarr benchmark's data and codec, and reports c-blosc's
// own single-threaded rate on them as cblosc-MB/s; it skips without a
// Python with numcodecs ($DAMACY_PYTHON).
func BenchmarkDecodeCBlosc(b *testing.B) {
	py, err := zarrtest.Python("numpy", "numcodecs")
	if err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	out, err := exec.Command(py, "-c", cbloscZarrbenchPy, dir).CombinedOutput()
	if err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	rates := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var name string
		var mbps float64
		if _, err := fmt.Sscan(line, &name, &mbps); err != nil {
			b.Fatalf("%q: %v", line, err)
		}
		rates[name] = mbps
	}
	for _, name := range []string{"zarrbench", "zarrbench-32"} {
		b.Run("blosclz-bitshuffle-"+name, func(b *testing.B) {
			frame, err := os.ReadFile(filepath.Join(dir, name+".blosc"))
			if err != nil {
				b.Fatal(err)
			}
			raw := benchData(name)
			dst := make([]byte, len(raw))
			d, err := NewDecoder()
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			if n, err := d.Decode(dst, frame); err != nil || !bytes.Equal(dst[:n], raw) {
				b.Fatalf("c-blosc's frame: %v, or not the data", err)
			}
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := d.Decode(dst, frame); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(rates[name], "cblosc-MB/s")
		})
	}
}
