package zarr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/klauspost/compress/zstd"
)

// Seed corpora live in testdata/fuzz/<target>/, one file per input, in
// the "go test fuzz v1" format; plain go test runs them.

// FuzzMetadata parses arbitrary bytes as zarr.json and as .zarray. A
// document that validates must survive a JSON round trip unchanged in
// meaning, and an array opened from it with no chunks stored must read as
// all fill.
func FuzzMetadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, doc []byte) {
		if m, err := ParseArrayMetadataV3(doc); err == nil {
			info, err := m.resolve("")
			if err != nil {
				checkTyped(t, err)
				return
			}
			out, err := json.Marshal(m)
			if err != nil {
				t.Fatalf("Marshal of a valid document: %v", err)
			}
			m2, err := ParseArrayMetadataV3(out)
			if err != nil {
				t.Fatalf("re-parse of %s: %v", out, err)
			}
			info2, err := m2.resolve("")
			if err != nil {
				t.Fatalf("re-validate of %s: %v", out, err)
			}
			if info2.codec.String() != info.codec.String() || !slices.Equal(info2.shape, info.shape) || !bytes.Equal(info2.fill, info.fill) {
				t.Fatalf("round trip changed the array: %s", out)
			}
			readFill(t, "zarr.json", doc, info)
		} else {
			checkTyped(t, err)
		}
		if m, err := ParseArrayMetadataV2(doc); err == nil {
			info, err := m.resolve("")
			if err != nil {
				checkTyped(t, err)
				return
			}
			readFill(t, ".zarray", doc, info)
		} else {
			checkTyped(t, err)
		}
	})
}

// checkTyped fails unless err is one of the package's typed errors.
func checkTyped(t *testing.T, err error) {
	t.Helper()
	var me *MetadataError
	if !errors.As(err, &me) || !(errors.Is(err, ErrFormat) || errors.Is(err, ErrUnsupported)) {
		t.Fatalf("untyped error %T: %v", err, err)
	}
}

// readFill opens doc from a store without chunks and reads a small box at
// the array's origin, which must be all fill.
func readFill(t *testing.T, name string, doc []byte, info *arrayInfo) {
	t.Helper()
	a, err := OpenStore(NewFSStore(fstest.MapFS{name: &fstest.MapFile{Data: doc}}), "")
	if err != nil {
		t.Fatalf("OpenStore of a valid document: %v", err)
	}
	box := make([]Range, a.Rank())
	for k, n := range info.shape {
		box[k] = Range{-1, min(n, 2)}
	}
	r, err := a.ReadRegion(box)
	if err != nil {
		t.Fatalf("ReadRegion(%v) without chunks: %v", box, err)
	}
	size := info.dtype.Size()
	for i := 0; i < len(r.Data); i += size {
		if !bytes.Equal(r.Data[i:i+size], info.fill) {
			t.Fatalf("element %d is %x, want the fill value %x", i/size, r.Data[i:i+size], info.fill)
		}
	}
}

// fuzzSharding is the sharding codec FuzzShardIndex parses indexes with:
// shards of 4x4 inner chunks of 2x2 uint16 elements.
func fuzzSharding(t testing.TB, atStart, crc bool) *Sharding {
	idx := `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`
	if !crc {
		idx = `[{"name":"bytes","configuration":{"endian":"big"}}]`
	}
	loc := "end"
	if atStart {
		loc = "start"
	}
	doc := fmt.Sprintf(`{"zarr_format":3,"node_type":"array","shape":[8,8],"data_type":"uint16",`+
		`"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[8,8]}},"chunk_key_encoding":{"name":"default"},"fill_value":7,`+
		`"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],`+
		`"index_codecs":%s,"index_location":%q}}]}`, idx, loc)
	info, err := mustParseV3(doc)
	if err != nil {
		t.Fatal(err)
	}
	return info.codec.Sharding()
}

// FuzzShardIndex reads arbitrary bytes as a shard object. Every entry of
// an index that parses must lie inside the object, and reading the whole
// shard must either fail with a *FormatError or return the array.
func FuzzShardIndex(f *testing.F) {
	f.Fuzz(func(t *testing.T, obj []byte, atStart, crc bool) {
		s := fuzzSharding(t, atStart, crc)
		st := NewFSStore(fstest.MapFS{"c/0/0": &fstest.MapFile{Data: obj}})
		idx, err := ReadShardIndex(st, s, Extent{Key: "c/0/0", Length: -1})
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Key != "c/0/0" {
				t.Fatalf("ReadShardIndex: untyped error %T: %v", err, err)
			}
			return
		}
		if len(idx.Entries) != 16 {
			t.Fatalf("%d entries, want 16", len(idx.Entries))
		}
		for i, e := range idx.Entries {
			if !e.Empty() && (e.Offset < 0 || e.Length < 0 || e.Offset+e.Length > int64(len(obj))) {
				t.Fatalf("entry %d = %+v lies outside the %d-byte shard", i, e, len(obj))
			}
		}
		// The same bytes as a whole shard inside a wrapped chunk decode or
		// fail with a typed error, and so does the planned read.
		d, err := NewDecoder(DecoderOptions{MaxChunkBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		c := &ChunkCodec{sharding: s, layout: cLayout([]int64{8, 8}, Uint16), fill: []byte{7, 0}, size: 128}
		c.names = []string{"sharding_indexed"}
		if err := d.Decode(make([]byte, 128), &Chunk{Key: "c/0/0", Codec: c}, obj); err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("Decode: untyped error %T: %v", err, err)
			}
		}
	})
}

// fuzzChains are the codec chains FuzzDecode decodes through, for a 4x8
// uint16 chunk.
var fuzzChains = []string{
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]`,
	`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"gzip","configuration":{"level":1}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib"}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.lz4"}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":2}}]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`,
	`[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":1}},"crc32c"]`,
	`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}},{"name":"zstd","configuration":{"level":1}}]`,
	`[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,4],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.lz4"}],` +
		`"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}},{"name":"zstd","configuration":{"level":1}}]`,
	`[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,4],"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[1,2],` +
		`"codecs":[{"name":"bytes","configuration":{"endian":"big"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_location":"start"}}],` +
		`"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}},"crc32c"]`,
}

func fuzzCodec(t testing.TB, which uint8) *ChunkCodec {
	doc := `{"zarr_format":3,"node_type":"array","shape":[4,8],"data_type":"uint16",` +
		`"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4,8]}},"chunk_key_encoding":{"name":"default"},"fill_value":7,` +
		`"codecs":` + fuzzChains[int(which)%len(fuzzChains)] + `}`
	info, err := mustParseV3(doc)
	if err != nil {
		t.Fatal(err)
	}
	return info.codec
}

// FuzzDecode decodes arbitrary bytes as a chunk through one of
// fuzzChains, with a small size limit. Decoding must fail with a
// *FormatError or produce exactly the chunk's bytes; a zstd chunk that
// decodes must decode the same with an independent zstd decoder.
func FuzzDecode(f *testing.F) {
	ref, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(1<<20))
	if err != nil {
		f.Fatal(err)
	}
	defer ref.Close()
	f.Fuzz(func(t *testing.T, src []byte, which uint8) {
		c := fuzzCodec(t, which)
		d, err := NewDecoder(DecoderOptions{MaxChunkBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		dst := make([]byte, c.Layout().Bytes()+8)
		for i := range dst {
			dst[i] = 0xa5
		}
		err = d.Decode(dst, &Chunk{Key: "k", Codec: c}, src)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Key != "k" {
				t.Fatalf("Decode: untyped error %T: %v", err, err)
			}
			return
		}
		if !bytes.Equal(dst[64:], bytes.Repeat([]byte{0xa5}, 8)) {
			t.Fatal("Decode wrote past the chunk's bytes")
		}
		if int(which)%len(fuzzChains) == 0 {
			want, err := ref.DecodeAll(src, nil)
			if err != nil || !bytes.Equal(want, dst[:64]) {
				t.Fatalf("reference zstd decoder: %d bytes, %v; ours decoded 64", len(want), err)
			}
		}
		// Decoding is deterministic: a second decode gives the same bytes.
		again := make([]byte, 64)
		if err := d.Decode(again, &Chunk{Key: "k", Codec: c}, src); err != nil || !bytes.Equal(again, dst[:64]) {
			t.Fatalf("second decode differs: %v", err)
		}
	})
}
