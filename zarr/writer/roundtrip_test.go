package writer

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

var allTypes = []zarr.DataType{
	zarr.Bool, zarr.Int8, zarr.Int16, zarr.Int32, zarr.Int64,
	zarr.Uint8, zarr.Uint16, zarr.Uint32, zarr.Uint64,
	zarr.Float16, zarr.Float32, zarr.Float64,
}

// testCodecs are the compressors the round trips cover.
func testCodecs() []Compression {
	cs := []Compression{
		{},
		{Codec: Zstd, Level: 3},
		{Codec: Zstd, Level: -5, Checksum: true},
		{Codec: Gzip, Level: 6},
		{Codec: Zlib, Level: 1},
		{Codec: LZ4},
	}
	for _, bc := range []blosc.Compressor{blosc.BloscLZ, blosc.LZ4, blosc.LZ4HC, blosc.Zlib, blosc.Zstd} {
		for _, sh := range []blosc.Shuffle{blosc.NoShuffle, blosc.ByteShuffle, blosc.BitShuffle} {
			cs = append(cs, Compression{Codec: Blosc, Level: 5, BloscCompressor: bc, Shuffle: sh})
		}
	}
	return cs
}

// testLayout is one way of storing an array; it sets every Spec field but
// the shape, data type and compression.
type testLayout struct {
	name string
	set  func(s *Spec, chunk []int64)
}

var testLayouts = []testLayout{
	{"v3", func(s *Spec, _ []int64) {}},
	{"v3-F-big-dotkeys", func(s *Spec, _ []int64) { s.Order, s.BigEndian, s.Separator = 'F', true, "." }},
	{"v3-v2keys-skip", func(s *Spec, _ []int64) { s.V2Keys, s.SkipEmptyChunks = true, true }},
	{"v3-shard-end", func(s *Spec, c []int64) { s.ShardShape = shardOf(c, 2) }},
	{"v3-shard-start-F-big", func(s *Spec, c []int64) {
		s.ShardShape, s.IndexAtStart, s.Order, s.BigEndian = shardOf(c, 3), true, 'F', true
	}},
	{"v3-shard-skip", func(s *Spec, c []int64) { s.ShardShape, s.SkipEmptyChunks = shardOf(c, 2), true }},
	{"v2", func(s *Spec, _ []int64) { s.Format = 2 }},
	{"v2-F-big-slash-skip", func(s *Spec, _ []int64) {
		s.Format, s.Order, s.BigEndian, s.Separator, s.SkipEmptyChunks = 2, 'F', true, "/", true
	}},
}

func shardOf(chunk []int64, k int64) []int64 {
	s := make([]int64, len(chunk))
	for i, c := range chunk {
		s[i] = c * k
	}
	return s
}

// testSeed returns a seed that differs on every run, and logs it.
func testSeed(t testing.TB) uint64 {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return seed
}

// randomData returns n elements of t: uniformly random bits (0 or 1 for
// bool), or a Synth field, with a random slab set to the fill pattern so
// that some chunks are all fill.
func randomData(rng *rand.Rand, t zarr.DataType, shape []int64, fill uint64) []byte {
	ti, _ := infoOf(t)
	n := int(product(shape))
	data := make([]byte, n*ti.size)
	if rng.IntN(2) == 0 {
		for i := range n {
			v := rng.Uint64() & ti.mask()
			if ti.kind == kindBool {
				v &= 1
			}
			store(data[i*ti.size:], ti.size, v)
		}
	} else {
		s := &Synth{Seed: rng.Uint64(), DataType: t, Shape: shape, Amplitude: rng.Float64(), RandomFraction: rng.Float64() / 4}
		if err := s.Fill(data, fullBox(shape)); err != nil {
			panic(err)
		}
	}
	// Fill the first rows along axis 0.
	rows := rng.Int64N(shape[0] + 1)
	row := n / int(shape[0])
	for i := range int(rows) * row {
		store(data[i*ti.size:], ti.size, fill)
	}
	return data
}

func fullBox(shape []int64) []zarr.Range {
	box := make([]zarr.Range, len(shape))
	for i, n := range shape {
		box[i].Stop = n
	}
	return box
}

// expected extracts box from data (of the given shape), the fill pattern
// outside it.
func expected(data []byte, shape []int64, box []zarr.Range, size int, fill uint64) []byte {
	out := make([]byte, boxBytes(box, size))
	idx := make([]int64, len(box))
	for o := 0; o < len(out); o += size {
		in := true
		var lin int64
		for d := range box {
			x := box[d].Start + idx[d]
			in = in && x >= 0 && x < shape[d]
			lin = lin*shape[d] + x
		}
		if in {
			copy(out[o:o+size], data[lin*int64(size):])
		} else {
			store(out[o:], size, fill)
		}
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < box[d].Stop-box[d].Start {
				break
			}
			idx[d] = 0
		}
	}
	return out
}

// randomFill picks a fill value for t, as a bit pattern and as the Fill
// that should give it.
func randomFill(rng *rand.Rand, t zarr.DataType, format int) (uint64, Fill) {
	ti, _ := infoOf(t)
	switch rng.IntN(3) {
	case 0:
		return 0, Fill{}
	case 1:
		if ti.kind == kindFloat {
			if format == 3 && rng.IntN(2) == 0 {
				nan := ti.canonicalNaN() | 1 // a NaN with a payload
				return nan, FillBits(nan)
			}
			return ti.canonicalNaN(), FillFloat(math.NaN())
		}
	}
	v := rng.Uint64() & ti.mask()
	if ti.kind == kindBool {
		v = 1
	}
	if ti.kind == kindFloat && isNaN(ti, v) && format == 2 {
		v = 0
	}
	return v, FillBits(v)
}

// TestRoundTrip writes arrays of every data type with every compressor and
// layout, and reads them back with package zarr: the whole array, then
// random boxes that may reach outside it.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	for _, dt := range allTypes {
		for _, c := range testCodecs() {
			for _, lay := range testLayouts {
				// Up to 3 chunks per dimension keeps the files few.
				rank := 1 + rng.IntN(4)
				shape := make([]int64, rank)
				chunk := make([]int64, rank)
				for d := range rank {
					shape[d] = 1 + rng.Int64N(int64(24/rank)+4)
					chunk[d] = ceilDiv(shape[d], 1+rng.Int64N(3)) + rng.Int64N(2)
				}
				spec := Spec{Shape: shape, ChunkShape: chunk, DataType: dt, Compression: c}
				lay.set(&spec, chunk)
				if c.Codec == Zlib && spec.Format != 2 {
					continue // format 3 has no zlib
				}
				fillBits, fill := randomFill(rng, dt, spec.Format)
				spec.Fill = fill
				name := fmt.Sprintf("%v/%s/%s", dt, compressionName(c), lay.name)
				t.Run(name, func(t *testing.T) { checkRoundTrip(t, rng, spec, fillBits) })
			}
		}
	}
}

func checkRoundTrip(t *testing.T, rng *rand.Rand, spec Spec, fill uint64) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "a")
	a, err := Create(dir, spec)
	if err != nil {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	data := randomData(rng, spec.DataType, spec.Shape, fill)
	if err := a.WriteRegion(fullBox(spec.Shape), data); err != nil {
		t.Fatalf("WriteRegion: %v", err)
	}
	r, err := zarr.Open(dir)
	if err != nil {
		t.Fatalf("zarr.Open: %v", err)
	}
	size := spec.DataType.Size()
	boxes := [][]zarr.Range{fullBox(spec.Shape)}
	for range 4 {
		box := make([]zarr.Range, len(spec.Shape))
		for d, n := range spec.Shape {
			box[d].Start = rng.Int64N(n+4) - 2
			box[d].Stop = box[d].Start + 1 + rng.Int64N(n+2)
		}
		boxes = append(boxes, box)
	}
	for _, box := range boxes {
		reg, err := r.ReadRegion(box)
		if err != nil {
			t.Fatalf("ReadRegion(%v): %v", box, err)
		}
		if want := expected(data, spec.Shape, box, size, fill); !bytes.Equal(reg.Data, want) {
			t.Fatalf("ReadRegion(%v) of %+v differs from what was written\n got %x\nwant %x", box, spec, reg.Data, want)
		}
	}
}

func compressionName(c Compression) string {
	switch {
	case c.Codec == Blosc:
		return fmt.Sprintf("blosc-%v-%v", c.BloscCompressor, c.Shuffle)
	case c.Checksum:
		return c.Codec.String() + "-checksum"
	}
	return c.Codec.String()
}
