package writer

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/google/go-cmp/cmp"
)

func goodSpec() Spec {
	return Spec{Shape: []int64{10, 20}, ChunkShape: []int64{4, 5}, DataType: zarr.Uint16}
}

var badSpecTests = []struct {
	name  string
	edit  func(s *Spec)
	field string // the field the error must name
}{
	{"format", func(s *Spec) { s.Format = 4 }, "Spec.Format"},
	{"no type", func(s *Spec) { s.DataType = 0 }, "Spec.DataType"},
	{"rank 0", func(s *Spec) { s.Shape = nil }, "Spec.Shape"},
	{"zero extent", func(s *Spec) { s.Shape[1] = 0 }, "Spec.Shape"},
	{"huge", func(s *Spec) { s.Shape = []int64{math.MaxInt64, 2} }, "Spec.Shape"},
	{"chunk rank", func(s *Spec) { s.ChunkShape = []int64{4} }, "Spec.ChunkShape"},
	{"chunk zero", func(s *Spec) { s.ChunkShape[0] = 0 }, "Spec.ChunkShape"},
	{"chunk too big", func(s *Spec) { s.ChunkShape = []int64{1 << 15, 1 << 15} }, "Spec.ChunkShape"},
	{"shard rank", func(s *Spec) { s.ShardShape = []int64{8} }, "Spec.ShardShape"},
	{"shard not multiple", func(s *Spec) { s.ShardShape = []int64{8, 12} }, "Spec.ShardShape"},
	{"shard v2", func(s *Spec) { s.Format, s.ShardShape = 2, []int64{8, 10} }, "Spec.ShardShape"},
	{"index without shards", func(s *Spec) { s.IndexAtStart = true }, "Spec.IndexAtStart"},
	{"order", func(s *Spec) { s.Order = 'X' }, "Spec.Order"},
	{"codec", func(s *Spec) { s.Compression.Codec = 99 }, "Spec.Compression.Codec"},
	{"zlib v3", func(s *Spec) { s.Compression.Codec = Zlib }, "Spec.Compression.Codec"},
	{"zstd level", func(s *Spec) { s.Compression = Compression{Codec: Zstd, Level: 23} }, "Spec.Compression.Level"},
	{"gzip level", func(s *Spec) { s.Compression = Compression{Codec: Gzip, Level: 10} }, "Spec.Compression.Level"},
	{"lz4 acceleration", func(s *Spec) { s.Compression = Compression{Codec: LZ4, Level: -1} }, "Spec.Compression.Level"},
	{"level without codec", func(s *Spec) { s.Compression.Level = 3 }, "Spec.Compression.Level"},
	{"checksum gzip", func(s *Spec) { s.Compression = Compression{Codec: Gzip, Checksum: true} }, "Spec.Compression.Checksum"},
	{"shuffle zstd", func(s *Spec) { s.Compression = Compression{Codec: Zstd, Shuffle: blosc.BitShuffle} }, "Spec.Compression.Shuffle"},
	{"blosc compressor zstd", func(s *Spec) { s.Compression = Compression{Codec: Zstd, BloscCompressor: blosc.LZ4} }, "Spec.Compression.BloscCompressor"},
	{"blocksize zstd", func(s *Spec) { s.Compression = Compression{Codec: Zstd, Blocksize: 4096} }, "Spec.Compression.Blocksize"},
	{"blosc level", func(s *Spec) {
		s.Compression = Compression{Codec: Blosc, Level: 10, BloscCompressor: blosc.LZ4}
	}, "Spec.Compression.Level"},
	{"blosc compressor", func(s *Spec) { s.Compression = Compression{Codec: Blosc, BloscCompressor: 9} }, "Spec.Compression.BloscCompressor"},
	{"blosc snappy", func(s *Spec) { s.Compression = Compression{Codec: Blosc, BloscCompressor: blosc.Snappy} }, "Spec.Compression.BloscCompressor"},
	{"blosc shuffle", func(s *Spec) {
		s.Compression = Compression{Codec: Blosc, BloscCompressor: blosc.LZ4, Shuffle: 7}
	}, "Spec.Compression.Shuffle"},
	{"blosc blocksize", func(s *Spec) {
		s.Compression = Compression{Codec: Blosc, BloscCompressor: blosc.LZ4, Blocksize: -1}
	}, "Spec.Compression.Blocksize"},
	{"fill range", func(s *Spec) { s.Fill = FillInt(70000) }, "Spec.Fill"},
	{"fill negative", func(s *Spec) { s.Fill = FillInt(-1) }, "Spec.Fill"},
	{"fill fraction", func(s *Spec) { s.Fill = FillFloat(1.5) }, "Spec.Fill"},
	{"fill nan int", func(s *Spec) { s.Fill = FillFloat(math.NaN()) }, "Spec.Fill"},
	{"fill bits", func(s *Spec) { s.Fill = FillBits(0x10000) }, "Spec.Fill"},
	{"fill bool", func(s *Spec) { s.DataType, s.Fill = zarr.Bool, FillInt(2) }, "Spec.Fill"},
	{"fill inexact", func(s *Spec) { s.DataType, s.Fill = zarr.Float32, FillInt(1<<24+1) }, "Spec.Fill"},
	{"fill nan payload v2", func(s *Spec) { s.Format, s.DataType, s.Fill = 2, zarr.Float32, FillBits(0x7fc00001) }, "Spec.Fill"},
	{"v2keys v2", func(s *Spec) { s.Format, s.V2Keys = 2, true }, "Spec.V2Keys"},
	{"separator", func(s *Spec) { s.Separator = "-" }, "Spec.Separator"},
	{"names count", func(s *Spec) { s.DimensionNames = []string{"y"} }, "Spec.DimensionNames"},
	{"names v2", func(s *Spec) { s.Format, s.DimensionNames = 2, []string{"y", "x"} }, "Spec.DimensionNames"},
	{"attributes", func(s *Spec) { s.Attributes = map[string]any{"f": math.Inf(1)} }, "Spec.Attributes"},
}

func TestBadSpec(t *testing.T) {
	for _, tt := range badSpecTests {
		s := goodSpec()
		tt.edit(&s)
		dir := filepath.Join(t.TempDir(), "a")
		a, err := Create(dir, s)
		var se *SpecError
		if a != nil || !errors.As(err, &se) || se.Field != tt.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Create = %v, %v; want nil, a *SpecError for %s", tt.name, a, err, tt.field)
			continue
		}
		if !strings.HasPrefix(err.Error(), "writer: "+tt.field+": ") {
			t.Errorf("%s: error %q does not start with the field", tt.name, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: Create wrote %s despite the error", tt.name, dir)
		}
	}
}

var fillTests = []struct {
	dt     zarr.DataType
	format int
	fill   Fill
	bits   uint64
	json   string
}{
	{zarr.Bool, 3, Fill{}, 0, "false"},
	{zarr.Bool, 3, FillInt(1), 1, "true"},
	{zarr.Int8, 3, FillInt(-128), 0x80, "-128"},
	{zarr.Int16, 3, FillBits(0xfffe), 0xfffe, "-2"},
	{zarr.Int64, 3, FillInt(math.MinInt64), 1 << 63, "-9223372036854775808"},
	{zarr.Int64, 3, FillFloat(-3), 0xfffffffffffffffd, "-3"},
	{zarr.Uint64, 3, FillUint(math.MaxUint64), math.MaxUint64, "18446744073709551615"},
	{zarr.Uint8, 2, FillUint(255), 255, "255"},
	{zarr.Float16, 3, FillFloat(1.5), 0x3e00, "1.5"},
	{zarr.Float16, 3, FillFloat(0.1), 0x2e66, "0.0999755859375"},
	{zarr.Float16, 3, FillInt(-2048), 0xe800, "-2048"},
	{zarr.Float16, 3, FillFloat(math.NaN()), 0x7e00, `"NaN"`},
	{zarr.Float16, 3, FillBits(0x7e01), 0x7e01, `"0x7e01"`},
	{zarr.Float32, 3, FillFloat(math.Inf(1)), 0x7f800000, `"Infinity"`},
	{zarr.Float32, 2, FillFloat(math.Inf(-1)), 0xff800000, `"-Infinity"`},
	{zarr.Float32, 3, FillFloat(math.Copysign(0, -1)), 0x80000000, "-0.0"},
	{zarr.Float32, 3, FillFloat(0.1), 0x3dcccccd, "0.10000000149011612"},
	{zarr.Float32, 3, FillBits(0xffc00000), 0xffc00000, `"0xffc00000"`},
	{zarr.Float32, 3, FillUint(1 << 40), 0x53800000, "1.099511627776e+12"},
	{zarr.Float64, 2, FillFloat(math.NaN()), 0x7ff8000000000000, `"NaN"`},
	{zarr.Float64, 3, FillFloat(1e300), math.Float64bits(1e300), "1e+300"},
	{zarr.Float64, 3, FillBits(1), 1, "5e-324"},
}

// TestFill checks fill values: their bit pattern, and the JSON written.
func TestFill(t *testing.T) {
	for _, tt := range fillTests {
		s := Spec{Format: tt.format, Shape: []int64{3}, ChunkShape: []int64{3}, DataType: tt.dt, Fill: tt.fill}
		l, err := s.resolve()
		if err != nil {
			t.Errorf("%v %+v: %v", tt.dt, tt.fill, err)
			continue
		}
		if l.fill != tt.bits || string(l.fillJSON()) != tt.json {
			t.Errorf("%v %+v: bits %#x, JSON %s; want %#x, %s", tt.dt, tt.fill, l.fill, l.fillJSON(), tt.bits, tt.json)
		}
	}
}

// TestMetadata checks the metadata documents field by field against what
// zarr-python writes for the same arrays.
func TestMetadata(t *testing.T) {
	tests := []struct {
		spec Spec
		file string
		want string
	}{{
		Spec{Shape: []int64{100, 64}, ChunkShape: []int64{8, 16}, ShardShape: []int64{32, 64}, IndexAtStart: true,
			DataType: zarr.Float32, BigEndian: true, Order: 'F', Fill: FillFloat(math.NaN()),
			Compression:    Compression{Codec: Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.BitShuffle},
			DimensionNames: []string{"y", "x"}, Attributes: map[string]any{"k": "<v>"}},
		"zarr.json", `{
		"zarr_format": 3, "node_type": "array", "shape": [100, 64], "data_type": "float32",
		"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 64]}},
		"chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
		"fill_value": "NaN",
		"codecs": [{"name": "sharding_indexed", "configuration": {
			"chunk_shape": [8, 16],
			"codecs": [
				{"name": "transpose", "configuration": {"order": [1, 0]}},
				{"name": "bytes", "configuration": {"endian": "big"}},
				{"name": "blosc", "configuration": {"typesize": 4, "cname": "lz4", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}}],
			"index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
			"index_location": "start"}}],
		"attributes": {"k": "<v>"},
		"dimension_names": ["y", "x"]}`,
	}, {
		Spec{Shape: []int64{5}, ChunkShape: []int64{2}, DataType: zarr.Uint8, V2Keys: true,
			Compression: Compression{Codec: Zstd, Level: 0, Checksum: true}},
		"zarr.json", `{
		"zarr_format": 3, "node_type": "array", "shape": [5], "data_type": "uint8",
		"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
		"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
		"fill_value": 0,
		"codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 0, "checksum": true}}]}`,
	}, {
		Spec{Shape: []int64{5, 6}, ChunkShape: []int64{2, 3}, DataType: zarr.Int64, Compression: Compression{Codec: LZ4}},
		"zarr.json", `{
		"zarr_format": 3, "node_type": "array", "shape": [5, 6], "data_type": "int64",
		"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
		"chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
		"fill_value": 0,
		"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}]}`,
	}, {
		Spec{Format: 2, Shape: []int64{5, 6}, ChunkShape: []int64{2, 3}, DataType: zarr.Uint16, BigEndian: true, Order: 'F',
			Separator: "/", Fill: FillInt(7), Compression: Compression{Codec: Blosc, Level: 3, BloscCompressor: blosc.Zstd, Shuffle: blosc.ByteShuffle}},
		".zarray", `{"zarr_format": 2, "shape": [5, 6], "chunks": [2, 3], "dtype": ">u2",
		"compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1, "blocksize": 0},
		"fill_value": 7, "order": "F", "filters": null, "dimension_separator": "/"}`,
	}, {
		Spec{Format: 2, Shape: []int64{5}, ChunkShape: []int64{5}, DataType: zarr.Bool, Compression: Compression{Codec: Zstd, Level: 1}},
		".zarray", `{"zarr_format": 2, "shape": [5], "chunks": [5], "dtype": "|b1",
		"compressor": {"id": "zstd", "level": 1},
		"fill_value": false, "order": "C", "filters": null, "dimension_separator": "."}`,
	}, {
		Spec{Format: 2, Shape: []int64{5}, ChunkShape: []int64{5}, DataType: zarr.Float64, Compression: Compression{Codec: Zlib, Level: 1},
			Attributes: map[string]any{"_ARRAY_DIMENSIONS": []string{"x"}}},
		".zattrs", `{"_ARRAY_DIMENSIONS": ["x"]}`,
	}, {
		Spec{Format: 2, Shape: []int64{5}, ChunkShape: []int64{5}, DataType: zarr.Int8, Compression: Compression{Codec: LZ4, Level: 9}},
		".zarray", `{"zarr_format": 2, "shape": [5], "chunks": [5], "dtype": "|i1",
		"compressor": {"id": "lz4", "acceleration": 9},
		"fill_value": 0, "order": "C", "filters": null, "dimension_separator": "."}`,
	}}
	for _, tt := range tests {
		dir := t.TempDir()
		if _, err := Create(dir, tt.spec); err != nil {
			t.Fatalf("Create(%+v): %v", tt.spec, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v\n%s", tt.file, err, got)
		}
		if err := json.Unmarshal([]byte(tt.want), &w); err != nil {
			t.Fatalf("test's JSON: %v", err)
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s of %+v differs (-want +got):\n%s", tt.file, tt.spec, diff)
		}
	}
}

// TestCreateExisting checks that Create resumes over identical metadata
// and refuses to overwrite a different node.
func TestCreateExisting(t *testing.T) {
	dir := t.TempDir()
	s := goodSpec()
	if _, err := Create(dir, s); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir, s); err != nil {
		t.Errorf("Create again with the same spec: %v", err)
	}
	s.Shape[0]++
	if a, err := Create(dir, s); a != nil || !errors.Is(err, ErrExists) {
		t.Errorf("Create with another shape = %v, %v; want ErrExists", a, err)
	}
	s = goodSpec()
	s.Format = 2
	if a, err := Create(dir, s); a != nil || !errors.Is(err, ErrExists) {
		t.Errorf("Create v2 over v3 = %v, %v; want ErrExists", a, err)
	}
}
