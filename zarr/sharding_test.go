package zarr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/damacy-go/damacy/zarr/blosc"
)

// testSharding parses a sharding codec with a 2x2 inner grid.
func testSharding(t *testing.T, index string, atStart bool) *Sharding {
	t.Helper()
	loc := `"end"`
	if atStart {
		loc = `"start"`
	}
	doc := v3Doc(t, map[string]string{"shape": `[8, 8]`, "chunk_grid": `{"name":"regular","configuration":{"chunk_shape":[8,8]}}`,
		"codecs": `[{"name":"sharding_indexed","configuration":{"chunk_shape":[4,4],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],` +
			`"index_codecs":` + index + `,"index_location":` + loc + `}}]`})
	info, err := mustParseV3(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	return info.codec.Sharding()
}

func encodeIndex(entries [][2]uint64, order binary.AppendByteOrder, crc bool) []byte {
	var b []byte
	for _, e := range entries {
		b = order.AppendUint64(b, e[0])
		b = order.AppendUint64(b, e[1])
	}
	if crc {
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	}
	return b
}

func TestParseIndex(t *testing.T) {
	const le = `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`
	const be = `[{"name":"bytes","configuration":{"endian":"big"}}]`
	E := uint64(sentinel)
	for _, tt := range []struct {
		name    string
		index   string
		atStart bool
		entries [][2]uint64
		length  int64 // the shard's length
		offset  int64 // the shard's offset in its object
		want    []IndexEntry
		err     error
	}{
		{"end", le, false, [][2]uint64{{0, 10}, {10, 5}, {E, E}, {20, 1}}, 100, 0,
			[]IndexEntry{{0, 10}, {10, 5}, {-1, 0}, {20, 1}}, nil},
		{"start, nested at 1000", le, true, [][2]uint64{{68, 10}, {E, E}, {E, E}, {78, 22}}, 100, 1000,
			[]IndexEntry{{1068, 10}, {-1, 0}, {-1, 0}, {1078, 22}}, nil},
		{"big endian, no crc", be, false, [][2]uint64{{0, 64}, {64, 0}, {E, E}, {0, 64}}, 64 + 64, 0,
			[]IndexEntry{{0, 64}, {64, 0}, {-1, 0}, {0, 64}}, nil},
		{"all empty", le, false, [][2]uint64{{E, E}, {E, E}, {E, E}, {E, E}}, 68, 0,
			[]IndexEntry{{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}}, nil},
		{"half sentinel offset", le, false, [][2]uint64{{0, 10}, {E, 5}, {E, E}, {20, 1}}, 100, 0, nil, ErrFormat},
		{"half sentinel length", le, false, [][2]uint64{{0, 10}, {5, E}, {E, E}, {20, 1}}, 100, 0, nil, ErrFormat},
		{"past the end", le, false, [][2]uint64{{0, 10}, {90, 11}, {E, E}, {20, 1}}, 100, 0, nil, ErrFormat},
		{"offset past the end", le, false, [][2]uint64{{101, 0}, {0, 1}, {E, E}, {20, 1}}, 100, 0, nil, ErrFormat},
		{"overflow", le, false, [][2]uint64{{1 << 63, 1 << 63}, {0, 1}, {E, E}, {20, 1}}, 100, 0, nil, ErrFormat},
		{"shorter than index", le, false, [][2]uint64{{0, 1}, {0, 1}, {0, 1}, {0, 1}}, 60, 0, nil, ErrFormat},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := testSharding(t, tt.index, tt.atStart)
			order := binary.AppendByteOrder(binary.LittleEndian)
			if tt.index == be {
				order = binary.BigEndian
			}
			b := encodeIndex(tt.entries, order, tt.index == le)
			if int64(len(b)) != s.IndexBytes() {
				t.Fatalf("index of %d bytes, IndexBytes() = %d", len(b), s.IndexBytes())
			}
			idx, err := s.ParseIndex(Extent{Key: "k", Offset: tt.offset, Length: tt.length}, b)
			if tt.err != nil {
				var fe *FormatError
				if !errors.Is(err, tt.err) || !errors.As(err, &fe) || fe.Key != "k" || idx != nil {
					t.Fatalf("ParseIndex = %v, %v; want nil, a *FormatError for k wrapping %v", idx, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range idx.Entries {
				if e != tt.want[i] {
					t.Errorf("entry %d = %+v, want %+v", i, e, tt.want[i])
				}
			}
			// A flipped bit is caught by the crc32c.
			if tt.index == le {
				b[3] ^= 1
				if _, err := s.ParseIndex(Extent{Key: "k", Offset: tt.offset, Length: tt.length}, b); !errors.Is(err, ErrChecksum) {
					t.Errorf("ParseIndex of a damaged index = %v; want ErrChecksum", err)
				}
			}
		})
	}
}

func TestReadShardIndex(t *testing.T) {
	s := testSharding(t, `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`, false)
	E := uint64(sentinel)
	body := make([]byte, 40)
	obj := append(body, encodeIndex([][2]uint64{{0, 8}, {8, 32}, {E, E}, {E, E}}, binary.LittleEndian, true)...)
	st := NewFSStore(fstest.MapFS{"s": &fstest.MapFile{Data: obj}})
	idx, err := ReadShardIndex(st, s, Extent{Key: "s", Length: -1})
	if err != nil || len(idx.Entries) != 4 || idx.Entries[1] != (IndexEntry{8, 32}) || !idx.Entries[3].Empty() {
		t.Fatalf("ReadShardIndex = %+v, %v", idx, err)
	}
	idx, err = ReadShardIndex(st, s, Extent{Key: "missing", Length: -1})
	if idx != nil || err != nil {
		t.Errorf("ReadShardIndex(missing shard) = %v, %v; want nil, nil", idx, err)
	}
	// A nested shard named by an extent past the object's end is truncated.
	if _, err := ReadShardIndex(st, s, Extent{Key: "s", Offset: 50, Length: 100}); !errors.Is(err, ErrFormat) {
		t.Errorf("ReadShardIndex past the end = %v; want ErrFormat", err)
	}
}

// TestPlanSharded checks that a plan's chunk ranges are the index entries
// and that Payload hands back what a GPU decoder would decompress.
func TestPlanSharded(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, uint64(testSeed(t))))
	for _, bc := range bytesChains(Uint16) {
		if !bc.route.Simple {
			continue
		}
		t.Run(bc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			a := tarray{shape: []int64{40, 40}, chunk: []int64{40, 40}, dt: Uint16,
				chain: &tchain{shard: &tshard{chunk: []int64{20, 20}, inner: &tchain{bb: bc.bb}}}}
			data := randArray(rng, Uint16, 1600)
			a.write(t, fsys, "a", data)
			arr := openMap(t, fsys, "a")
			if got, want := arr.ChunkShape(), []int64{20, 20}; !slices.Equal(got, want) {
				t.Errorf("ChunkShape() = %v, want %v", got, want)
			}
			p, err := arr.Plan([]Range{{10, 30}, {-5, 25}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Chunks) != 4 {
				t.Fatalf("%d chunks, want 4", len(p.Chunks))
			}
			obj := fsys["a/c/0/0"].Data
			for _, ch := range p.Chunks {
				if ch.Codec.Route() != bc.route {
					t.Errorf("inner route %+v, want %+v", ch.Codec.Route(), bc.route)
				}
				stored := obj[ch.Offset : ch.Offset+ch.Length]
				payload, err := ch.Payload(stored)
				if err != nil {
					t.Fatal(err)
				}
				want := extract(data, a.shape, ch.Origin, []int64{20, 20}, 2, []byte{0, 0})
				if got := decompressPayload(t, bc.route.Compression, payload, len(want)); !bytes.Equal(got, want) {
					t.Errorf("payload of chunk at %v does not decompress to the chunk", ch.Origin)
				}
			}
		})
	}
}

// decompressPayload decodes a payload the way a GPU decoder would, with
// the compressor alone.
func decompressPayload(t *testing.T, c Compression, p []byte, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	switch c {
	case CompressionNone:
		return p
	case CompressionZstd:
		d, _ := zstd.NewReader(nil)
		defer d.Close()
		b, err := d.DecodeAll(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	case CompressionLZ4:
		m, err := lz4.UncompressBlock(p[4:], out)
		if err != nil || m != n {
			t.Fatalf("lz4: %d, %v", m, err)
		}
	case CompressionBlosc:
		if _, err := blosc.Decode(out, p); err != nil {
			t.Fatal(err)
		}
	default:
		d, _ := NewDecoder(DecoderOptions{})
		defer d.Close()
		var c bytesToBytes = deflateCodec{zlib: c == CompressionZlib}
		if _, err := c.decode(d, out, p); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
