package zarr

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/fstest"

	"github.com/klauspost/compress/zstd"

	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

var allTypes = []DataType{Bool, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Float16, Float32, Float64}

// bytesChains lists bytes-to-bytes chains for the codec tests, with the
// Route each must report.
func bytesChains(dt DataType) []struct {
	name  string
	bb    []tcodec
	route Route
} {
	ts := dt.Size()
	return []struct {
		name  string
		bb    []tcodec
		route Route
	}{
		{"raw", nil, Route{Simple: true}},
		{"zstd", []tcodec{zstdCodecT(false, false, false)}, Route{true, CompressionZstd}},
		{"zstd-checksum", []tcodec{zstdCodecT(true, false, false)}, Route{true, CompressionZstd}},
		{"zstd-no-content-size", []tcodec{zstdCodecT(true, true, false)}, Route{true, CompressionZstd}},
		{"zstd-two-frames", []tcodec{zstdCodecT(false, false, true)}, Route{true, CompressionZstd}},
		{"zstd-crc32c", []tcodec{zstdCodecT(false, false, false), crc32cT}, Route{true, CompressionZstd}},
		{"gzip", []tcodec{gzipT}, Route{true, CompressionGzip}},
		{"zlib", []tcodec{zlibT}, Route{true, CompressionZlib}},
		{"lz4", []tcodec{lz4T}, Route{true, CompressionLZ4}},
		{"crc32c", []tcodec{crc32cT}, Route{Simple: true}},
		{"crc32c-zstd", []tcodec{crc32cT, zstdCodecT(false, false, false)}, Route{}},
		{"gzip-zstd", []tcodec{gzipT, zstdCodecT(false, false, false)}, Route{}},
		{"blosc-lz4-shuffle", []tcodec{bloscT("lz4", blosc.ByteShuffle, ts)}, Route{true, CompressionBlosc}},
		{"blosc-zstd-bitshuffle", []tcodec{bloscT("zstd", blosc.BitShuffle, ts)}, Route{true, CompressionBlosc}},
		{"blosc-lz4hc-noshuffle", []tcodec{bloscT("lz4hc", blosc.NoShuffle, ts)}, Route{true, CompressionBlosc}},
		{"blosc-blosclz-shuffle", []tcodec{bloscT("blosclz", blosc.ByteShuffle, ts)}, Route{true, CompressionBlosc}},
		{"blosc-zlib-bitshuffle", []tcodec{bloscT("zlib", blosc.BitShuffle, ts)}, Route{true, CompressionBlosc}},
		{"blosc-snappy-shuffle", []tcodec{bloscT("snappy", blosc.ByteShuffle, ts)}, Route{true, CompressionBlosc}},
	}
}

// TestCodecs reads arrays through every codec chain, data type and byte
// order, with and without a transpose, and compares them with the source.
func TestCodecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, uint64(testSeed(t))))
	shape := []int64{9, 13, 70} // edge chunks on every axis
	chunk := []int64{4, 8, 64}
	for _, dt := range allTypes {
		for _, endian := range []Endian{LittleEndian, BigEndian} {
			if dt.Size() == 1 && endian == BigEndian {
				continue
			}
			for _, perm := range [][]int{nil, {2, 0, 1}} {
				for _, bc := range bytesChains(dt) {
					name := fmt.Sprintf("%s/%s/perm%v/%s", dt, endian, perm, bc.name)
					t.Run(name, func(t *testing.T) {
						data := randArray(rng, dt, prod(shape))
						a := &tarray{shape: shape, chunk: chunk, dt: dt, fill: fillJSON(dt),
							chain: &tchain{perm: perm, endian: endian, bb: bc.bb}}
						fsys := fstest.MapFS{}
						a.write(t, fsys, "arr", data)
						arr := openMap(t, fsys, "arr")
						if got := arr.Codec().Route(); got != bc.route {
							t.Errorf("Route() = %+v, want %+v", got, bc.route)
						}
						for _, box := range [][]Range{
							{{0, 9}, {0, 13}, {0, 70}},
							{{-2, 5}, {7, 15}, {60, 71}},
						} {
							checkRegion(t, arr, data, box, nil)
						}
					})
				}
			}
		}
	}
}

// fillJSON returns a JSON fill value for dt that is not zero.
func fillJSON(dt DataType) string {
	switch {
	case dt == Bool:
		return "true"
	case dt.IsFloat():
		return `"-Infinity"`
	case dt.IsSigned():
		return "-3"
	}
	return "5"
}

func prod(s []int64) int64 {
	n := int64(1)
	for _, v := range s {
		n *= v
	}
	return n
}

// checkRegion reads box from a and compares it with the box computed from
// the source data.
func checkRegion(t *testing.T, a *Array, data []byte, box []Range, missing func(p []int64) bool) {
	t.Helper()
	r, err := a.ReadRegion(box)
	if err != nil {
		t.Fatalf("ReadRegion(%v): %v", box, err)
	}
	want := expectRegion(data, a.Shape(), a.DataType(), a.FillValue(), box, missing)
	if !bytes.Equal(r.Data, want) {
		i := 0
		for i < len(want) && r.Data[i] == want[i] {
			i++
		}
		t.Fatalf("ReadRegion(%v): data differs from byte %d of %d", box, i, len(want))
	}
	for k, n := range r.Shape {
		if n != box[k].Len() {
			t.Fatalf("ReadRegion(%v): shape %v", box, r.Shape)
		}
	}
}

// testSeed returns the test's seed (zarrtest.Seed: logged, and replayed
// from DAMACY_SEED).
func testSeed(t *testing.T) int64 {
	return int64(zarrtest.Seed(t))
}

// TestDecoderNoAllocs checks that decoding a stream of chunks with one
// Decoder allocates nothing once warm, for every single-compressor chain.
func TestDecoderNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	rng := rand.New(rand.NewPCG(2, uint64(testSeed(t))))
	shape := []int64{32, 64}
	for _, bc := range bytesChains(Uint16) {
		// Only single-compressor chains decode without scratch; blosc's
		// zlib streams go through compress/zlib, which allocates per stream.
		if !bc.route.Simple || bc.name == "blosc-zlib-bitshuffle" {
			continue
		}
		t.Run(bc.name, func(t *testing.T) {
			ch := &tchain{bb: bc.bb}
			doc := (&tarray{shape: shape, chunk: shape, dt: Uint16, chain: ch}).metadata()
			info, err := mustParseV3(doc)
			if err != nil {
				t.Fatal(err)
			}
			data := randArray(rng, Uint16, prod(shape))
			stored := ch.encode(t, data, shape, Uint16, info.fill)
			d, err := NewDecoder(DecoderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			c := &Chunk{Key: "c/0/0", Length: int64(len(stored)), Codec: info.codec}
			dst := make([]byte, info.codec.Layout().Bytes())
			// Warm the decoders first (blosc's zstd keeps one per
			// GOMAXPROCS, used in turn): only the steady state must not
			// allocate.
			for range 4 * runtime.GOMAXPROCS(0) {
				if err := d.Decode(dst, c, stored); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(20, func() {
				if err := d.Decode(dst, c, stored); err != nil {
					t.Fatal(err)
				}
			})
			if !bytes.Equal(dst, data) {
				t.Fatal("decoded chunk differs from the source")
			}
			if allocs != 0 {
				t.Errorf("Decode allocates %v times per chunk, want 0", allocs)
			}
		})
	}
}

// TestZstdFrames checks the zstd fixtures really have the frame shapes the
// codec tests claim to cover.
func TestZstdFrames(t *testing.T) {
	data := randArray(rand.New(rand.NewPCG(3, 3)), Uint8, 5000)
	for _, tc := range []struct {
		codec   tcodec
		fcs     bool
		frames  int
		hasCRC  bool
		comment string
	}{
		{zstdCodecT(false, false, false), true, 1, false, "EncodeAll"},
		{zstdCodecT(true, true, false), false, 1, true, "streaming writer"},
		{zstdCodecT(true, false, true), true, 2, true, "two frames"},
	} {
		b := tc.codec.enc(t, data)
		var h zstd.Header
		if err := h.Decode(b); err != nil {
			t.Fatal(err)
		}
		if h.HasFCS != tc.fcs || h.HasCheckSum != tc.hasCRC {
			t.Errorf("%s: HasFCS %v HasCheckSum %v, want %v %v", tc.comment, h.HasFCS, h.HasCheckSum, tc.fcs, tc.hasCRC)
		}
		if tc.frames == 2 && bytes.Count(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) < 2 {
			t.Errorf("%s: fewer than two frame magics", tc.comment)
		}
	}
}

// TestDecodeStaysInChunk decodes chunks into the middle of a larger arena,
// as a pipeline decodes neighbouring chunks of one buffer, and checks that
// no byte outside the chunk's own range and its DecodeSlack changes, and,
// with dst capped at the chunk, none past the chunk.
func TestDecodeStaysInChunk(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, uint64(testSeed(t))))
	shape := []int64{32, 64, 64}
	for _, bc := range bytesChains(Uint16) {
		t.Run(bc.name, func(t *testing.T) {
			ch := &tchain{bb: bc.bb}
			info, err := mustParseV3((&tarray{shape: shape, chunk: shape, dt: Uint16, chain: ch}).metadata())
			if err != nil {
				t.Fatal(err)
			}
			data := microscopyChunk(rng)
			stored := ch.encode(t, data, shape, Uint16, info.fill)
			d, err := NewDecoder(DecoderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			const guard = 1 << 16
			for _, capped := range []bool{false, true} {
				arena := bytes.Repeat([]byte{0xa5}, guard+len(data)+guard)
				dst, room := arena[guard:], DecodeSlack
				if capped {
					dst, room = arena[guard:guard+len(data):guard+len(data)], 0
				}
				if err := d.Decode(dst, &Chunk{Key: "c/0/0", Codec: info.codec}, stored); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(arena[guard:guard+len(data)], data) {
					t.Fatal("decoded chunk differs from the source")
				}
				for _, r := range [][2]int{{0, guard}, {guard + len(data) + room, len(arena)}} {
					if !bytes.Equal(arena[r[0]:r[1]], bytes.Repeat([]byte{0xa5}, r[1]-r[0])) {
						t.Fatalf("Decode (capped %v) changed bytes outside the chunk and its room (at %d..%d)", capped, r[0], r[1])
					}
				}
			}
		})
	}
}
