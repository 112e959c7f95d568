package nvcomp

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// Test data and encoders shared by the CPU and GPU tests. Every test draws a
// fresh seed and logs it (zarrtest.Seed), so a failure can be replayed with
// DAMACY_SEED.

// newRand returns a generator seeded from the test's seed and name.
func newRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := zarrtest.Seed(t)
	var h uint64
	for _, c := range t.Name() {
		h = h*1099511628211 + uint64(c)
	}
	return rand.New(rand.NewPCG(seed, h))
}

// randomBytes returns n uniformly random bytes (incompressible).
func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// smoothU16 returns n bytes of little-endian uint16 samples like a
// microscopy volume: a smooth 2-D field (rows of width w; 0.1 to 0.6
// periods per row, amplitude 3000, so neighbours differ by at most about
// 50) plus noiseBits bits of uniform noise, with a random phase and
// frequency per call.
func smoothU16(r *rand.Rand, n, w, noiseBits int) []byte {
	b := make([]byte, n&^1)
	px, py := r.Float64()*2*math.Pi, r.Float64()*2*math.Pi
	fx, fy := 0.1+r.Float64()/2, 0.1+r.Float64()/2
	row := make([]float64, w)
	for x := range row {
		row[x] = 3000 * math.Sin(2*math.Pi*fx*float64(x)/float64(w)+px)
	}
	mask := uint64(1)<<noiseBits - 1
	var bits uint64
	var left int
	var cy float64
	for i := 0; i < len(b)/2; i++ {
		x := i % w
		if x == 0 {
			cy = math.Cos(2*math.Pi*fy*float64(i/w)/float64(w) + py)
		}
		if left < noiseBits {
			bits, left = r.Uint64(), 64
		}
		v := 20000 + row[x]*cy + float64(bits&mask)
		bits >>= noiseBits
		left -= noiseBits
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
	return b
}

// shuffle2 byte-shuffles 2-byte elements: all low bytes, then all high bytes
// (blosc's shuffle with typesize 2).
func shuffle2(b []byte) []byte {
	n := len(b) / 2
	out := make([]byte, len(b))
	for i := range n {
		out[i] = b[2*i]
		out[n+i] = b[2*i+1]
	}
	return out
}

// zstdLevels are the klauspost levels the tests use: about zstd levels 1, 3
// and 7, and "best", to which klauspost maps zstd levels 10 and up (19
// included).
var zstdLevels = []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression}

// zstdEncode compresses b as one frame with a content size.
func zstdEncode(t testing.TB, b []byte, level zstd.EncoderLevel, checksum bool) []byte {
	t.Helper()
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderCRC(checksum), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return e.EncodeAll(b, nil)
}

// zstdEncodeNoSize compresses b as one frame without Frame_Content_Size,
// as streaming writers emit: a frame from zstdEncode with its header
// rewritten to carry a Window_Descriptor (the frame's own, or one that
// covers the content of a single-segment frame) and no content size. The
// blocks and the checksum are unchanged.
func zstdEncodeNoSize(t testing.TB, b []byte, level zstd.EncoderLevel, checksum bool) []byte {
	t.Helper()
	frame := zstdEncode(t, b, level, checksum)
	f, reason := scanZstdFrame(frame)
	fhd := frame[4]
	if reason != ZstdGPU || fhd&3 != 0 || f.contentSize != int64(len(b)) {
		t.Fatalf("klauspost wrote an unexpected frame header %#x (%+v, %v)", fhd, f, reason)
	}
	p := 5
	var window byte
	if fhd>>5&1 == 0 {
		window = frame[p]
		p++
	} else {
		exp := 0
		for 1<<(10+exp) < len(b) {
			exp++
		}
		window = byte(exp << 3)
	}
	p += [4]int{1, 2, 4, 8}[fhd>>6] // flag 0 with a single segment: 1 byte
	out := binary.LittleEndian.AppendUint32(nil, zstdMagic)
	out = append(out, fhd&(1<<2), window) // keep only the checksum flag
	out = append(out, frame[p:f.end]...)
	if g, r := scanZstdFrame(out); r != ZstdGPU || g.contentSize != -1 || g.end != len(out) {
		t.Fatalf("rewritten frame scans as %+v, %v", g, r)
	}
	return out
}

// skippableFrame returns a skippable frame with n payload bytes.
func skippableFrame(r *rand.Rand, n int) []byte {
	f := binary.LittleEndian.AppendUint32(nil, skippableMagic|uint32(r.IntN(16)))
	f = binary.LittleEndian.AppendUint32(f, uint32(n))
	return append(f, randomBytes(r, n)...)
}

// lz4Encode compresses b as one raw LZ4 block, fast or HC.
func lz4Encode(t testing.TB, b []byte, hc bool) []byte {
	t.Helper()
	dst := make([]byte, lz4.CompressBlockBound(len(b)))
	var n int
	var err error
	if hc {
		var c lz4.CompressorHC
		n, err = c.CompressBlock(b, dst)
	} else {
		var c lz4.Compressor
		n, err = c.CompressBlock(b, dst)
	}
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("lz4: %d bytes did not compress into a block", len(b))
	}
	return dst[:n]
}

// cpuZstd decodes src on the CPU into at most want bytes.
func cpuZstd(src []byte, want int) ([]byte, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderMaxMemory(1<<26), zstd.WithDecoderMaxWindow(1<<26))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(src, make([]byte, 0, want))
}

// cpuLZ4 decodes a raw LZ4 block on the CPU into a buffer of capacity bytes.
func cpuLZ4(src []byte, capacity int) ([]byte, error) {
	dst := make([]byte, capacity)
	n, err := lz4.UncompressBlock(src, dst)
	if err != nil {
		return nil, err
	}
	return dst[:n], nil
}
