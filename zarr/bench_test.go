package zarr

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/damacy-go/damacy/zarr/blosc"
)

// microscopyChunk returns a 32x64x64 uint16 chunk (256 KiB) that looks like
// microscopy data: a smooth background plus 6 bits of noise.
func microscopyChunk(rng *rand.Rand) []byte {
	b := make([]byte, 0, 32*64*64*2)
	for z := range 32 {
		for y := range 64 {
			for x := range 64 {
				v := 1000 + 200*math.Sin(float64(x)/40)*math.Cos(float64(y)/30) + float64(z) + float64(rng.IntN(64))
				b = binary.LittleEndian.AppendUint16(b, uint16(v))
			}
		}
	}
	return b
}

var benchChains = []struct {
	name string
	bb   []tcodec
}{
	{"zstd", []tcodec{zstdCodecT(false, false, false)}},
	{"zstd-no-content-size", []tcodec{zstdCodecT(true, true, false)}},
	{"lz4", []tcodec{lz4T}},
	{"blosc-lz4-shuffle", []tcodec{bloscT("lz4", blosc.ByteShuffle, 2)}},
	{"blosc-zstd-bitshuffle", []tcodec{bloscT("zstd", blosc.BitShuffle, 2)}},
	{"gzip", []tcodec{gzipT}},
	{"crc32c", []tcodec{crc32cT}},
}

// benchChunk encodes a 256 KiB microscopy-like chunk through bb.
func benchChunk(b *testing.B, bb []tcodec) (c *Chunk, stored, data []byte) {
	shape := []int64{32, 64, 64}
	data = microscopyChunk(rand.New(rand.NewPCG(13, 13)))
	ch := &tchain{bb: bb}
	info, err := mustParseV3((&tarray{shape: shape, chunk: shape, dt: Uint16, chain: ch}).metadata())
	if err != nil {
		b.Fatal(err)
	}
	stored = ch.encode(b, data, shape, Uint16, info.fill)
	return &Chunk{Key: "c/0/0/0", Length: int64(len(stored)), Codec: info.codec}, stored, data
}

// BenchmarkDecode measures single-core CPU decode speed of 256 KiB uint16
// chunks; the MB/s column counts decoded bytes.
func BenchmarkDecode(b *testing.B) {
	for _, bc := range benchChains {
		b.Run(bc.name, func(b *testing.B) {
			c, stored, data := benchChunk(b, bc.bb)
			d, err := NewDecoder(DecoderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			dst := make([]byte, len(data))
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := d.Decode(dst, c, stored); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data))/float64(len(stored)), "ratio")
		})
	}
}

// BenchmarkDecodeParallel is BenchmarkDecode on every core, one Decoder
// per goroutine, as a pipeline's CPU decode workers run.
func BenchmarkDecodeParallel(b *testing.B) {
	for _, bc := range benchChains {
		b.Run(bc.name, func(b *testing.B) {
			c, stored, data := benchChunk(b, bc.bb)
			b.SetBytes(int64(len(data)))
			b.RunParallel(func(pb *testing.PB) {
				d, err := NewDecoder(DecoderOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				defer d.Close()
				dst := make([]byte, len(data))
				for pb.Next() {
					if err := d.Decode(dst, c, stored); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCopyChunk measures assembling a 128^3 box from decoded
// 32x64x64 uint16 chunks (little-endian, C order: the memmove path).
func BenchmarkCopyChunk(b *testing.B) {
	p := &Plan{Shape: []int64{128, 128, 128}, DataType: Uint16}
	l := cLayout([]int64{32, 64, 64}, Uint16)
	p.Chunks = []Chunk{{Codec: &ChunkCodec{layout: l}}}
	decoded := microscopyChunk(rand.New(rand.NewPCG(14, 14)))
	region := make([]byte, p.Bytes())
	op := Copy{Chunk: 0, Src: []int64{0, 0, 0}, Shape: []int64{32, 64, 64}}
	b.SetBytes(4 * int64(len(decoded)))
	for b.Loop() {
		for z := int64(0); z < 128; z += 32 {
			op.Dst = []int64{z, 64, 0}
			if err := p.CopyChunk(region, op, decoded); err != nil {
				b.Fatal(err)
			}
		}
	}
}
