package zarr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func le(v uint64, size int) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, v)
	return b[:size]
}

func f32(f float32) []byte { return le(uint64(math.Float32bits(f)), 4) }
func f64(f float64) []byte { return le(math.Float64bits(f), 8) }

var fillTests = []struct {
	json string
	dt   DataType
	v2   bool
	want []byte // nil: an error wrapping ErrFormat
}{
	{"true", Bool, false, []byte{1}},
	{"false", Bool, false, []byte{0}},
	{"1", Bool, false, nil},
	{"1", Bool, true, []byte{1}},
	{"0", Int8, false, []byte{0}},
	{"-128", Int8, false, []byte{0x80}},
	{"-129", Int8, false, nil},
	{"127", Int8, false, []byte{0x7f}},
	{"255", Uint8, false, []byte{0xff}},
	{"256", Uint8, false, nil},
	{"-1", Uint8, false, nil},
	{"-1", Int16, false, le(0xffff, 2)},
	{"65535", Uint16, false, le(0xffff, 2)},
	{"3.0", Uint16, false, le(3, 2)},
	{"1e3", Int32, false, le(1000, 4)},
	{"2.5", Int32, false, nil},
	{`"1"`, Int32, false, nil},
	{"-2147483648", Int32, false, le(0x80000000, 4)},
	{"9223372036854775807", Int64, false, le(math.MaxInt64, 8)},
	{"-9223372036854775808", Int64, false, le(1<<63, 8)},
	{"18446744073709551615", Uint64, false, le(math.MaxUint64, 8)},
	{"18446744073709551616", Uint64, false, nil},
	{"1.5", Float32, false, f32(1.5)},
	{"0.1", Float32, false, f32(0.1)},
	{"0.1", Float64, false, f64(0.1)},
	{"-0.0", Float64, false, f64(math.Copysign(0, -1))},
	{"1e400", Float64, false, f64(math.Inf(1))},
	{`"NaN"`, Float32, false, le(0x7fc00000, 4)},
	{`"NaN"`, Float64, false, le(0x7ff8000000000000, 8)},
	{`"NaN"`, Float16, false, le(0x7e00, 2)},
	{`"Infinity"`, Float16, false, le(0x7c00, 2)},
	{`"-Infinity"`, Float32, false, f32(float32(math.Inf(-1)))},
	{`"0x7fc00001"`, Float32, false, le(0x7fc00001, 4)},
	{`"0x3c00"`, Float16, false, le(0x3c00, 2)},
	{`"0x7ff0000000000001"`, Float64, false, le(0x7ff0000000000001, 8)},
	{`"0x123456789"`, Float32, false, nil},
	{`"0xzz"`, Float32, false, nil},
	{`"0x7fc00000"`, Float32, true, nil},
	{`"nan"`, Float32, false, nil},
	{"1.5", Float16, false, le(0x3e00, 2)},
	{"65504", Float16, false, le(0x7bff, 2)},
	{"true", Float32, false, nil},
	{"null", Float32, false, nil},
	{"null", Float32, true, le(0, 4)},
	{"null", Uint16, true, le(0, 2)},
	{"null", Bool, true, []byte{0}},
	{`"NaN"`, Float64, true, le(0x7ff8000000000000, 8)},
	{`"-Infinity"`, Float64, true, f64(math.Inf(-1))},
	{"[1,2]", Float64, false, nil},
	{"{}", Int8, false, nil},
}

func TestParseFill(t *testing.T) {
	for _, tt := range fillTests {
		got, err := parseFill(json.RawMessage(tt.json), tt.dt, tt.v2)
		if tt.want == nil {
			if err == nil || !errors.Is(err, ErrFormat) {
				t.Errorf("parseFill(%s, %v, v2=%v) = %x, %v; want an ErrFormat error", tt.json, tt.dt, tt.v2, got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tt.want) {
			t.Errorf("parseFill(%s, %v, v2=%v) = %x, %v; want %x, nil", tt.json, tt.dt, tt.v2, got, err, tt.want)
		}
	}
}

// v3Doc returns a valid zarr.json with the given fields replaced (a value
// of "" deletes the field).
func v3Doc(t *testing.T, repl map[string]string) []byte {
	t.Helper()
	doc := map[string]json.RawMessage{
		"zarr_format":        json.RawMessage(`3`),
		"node_type":          json.RawMessage(`"array"`),
		"shape":              json.RawMessage(`[10, 20]`),
		"data_type":          json.RawMessage(`"uint16"`),
		"chunk_grid":         json.RawMessage(`{"name":"regular","configuration":{"chunk_shape":[4,8]}}`),
		"chunk_key_encoding": json.RawMessage(`{"name":"default","configuration":{"separator":"/"}}`),
		"fill_value":         json.RawMessage(`0`),
		"codecs":             json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}]`),
		"attributes":         json.RawMessage(`{}`),
	}
	for k, v := range repl {
		if v == "" {
			delete(doc, k)
		} else {
			doc[k] = json.RawMessage(v)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("bad test document: %v", err)
	}
	return b
}

const shard = `{"name":"sharding_indexed","configuration":{"chunk_shape":[2,4],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}`

var v3Tests = []struct {
	name  string
	repl  map[string]string
	err   error  // nil: valid
	field string // the MetadataError's Field
}{
	{"valid", nil, nil, ""},
	{"bare codec names", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"big"}},"crc32c"]`}, nil, ""},
	{"bare key encoding", map[string]string{"chunk_key_encoding": `"default"`}, nil, ""},
	{"v2 keys", map[string]string{"chunk_key_encoding": `{"name":"v2","configuration":{"separator":"/"}}`}, nil, ""},
	{"dimension names", map[string]string{"dimension_names": `["y", null]`}, nil, ""},
	{"ignorable extension", map[string]string{"foo": `{"name":"foo","must_understand":false}`}, nil, ""},
	{"ignorable transformer", map[string]string{"storage_transformers": `[{"name":"x","must_understand":false}]`}, nil, ""},
	{"sharding", map[string]string{"codecs": `[` + shard + `]`}, nil, ""},
	{"float16", map[string]string{"data_type": `"float16"`, "fill_value": `"NaN"`}, nil, ""},
	{"0-d", map[string]string{"shape": `[]`, "chunk_grid": `{"name":"regular","configuration":{"chunk_shape":[]}}`}, nil, ""},
	{"zero extent", map[string]string{"shape": `[0, 20]`}, nil, ""},

	{"unknown field", map[string]string{"foo": `{"name":"foo"}`}, ErrUnsupported, "foo"},
	{"must understand field", map[string]string{"foo": `1`}, ErrUnsupported, "foo"},
	{"transformer", map[string]string{"storage_transformers": `[{"name":"x"}]`}, ErrUnsupported, "storage_transformers[0]"},
	{"zarr_format 2", map[string]string{"zarr_format": `2`}, ErrFormat, "zarr_format"},
	{"group", map[string]string{"node_type": `"group"`}, ErrFormat, "node_type"},
	{"no shape", map[string]string{"shape": ""}, ErrFormat, "shape"},
	{"negative shape", map[string]string{"shape": `[10, -1]`}, ErrFormat, "shape"},
	{"huge shape", map[string]string{"shape": `[9223372036854775807, 3]`}, ErrFormat, "shape"},
	{"unknown dtype", map[string]string{"data_type": `"complex64"`}, ErrUnsupported, "data_type"},
	{"dtype config", map[string]string{"data_type": `{"name":"uint16","configuration":{"x":1}}`}, ErrUnsupported, "data_type"},
	{"no dtype", map[string]string{"data_type": ""}, ErrFormat, "data_type"},
	{"rectilinear", map[string]string{"chunk_grid": `{"name":"rectilinear","configuration":{}}`}, ErrUnsupported, "chunk_grid.name"},
	{"grid rank", map[string]string{"chunk_grid": `{"name":"regular","configuration":{"chunk_shape":[4]}}`}, ErrFormat, "chunk_grid.configuration.chunk_shape"},
	{"zero chunk", map[string]string{"chunk_grid": `{"name":"regular","configuration":{"chunk_shape":[4,0]}}`}, ErrFormat, "chunk_grid.configuration.chunk_shape"},
	{"grid extra", map[string]string{"chunk_grid": `{"name":"regular","configuration":{"chunk_shape":[4,8],"x":1}}`}, ErrFormat, "chunk_grid.configuration"},
	{"bad separator", map[string]string{"chunk_key_encoding": `{"name":"default","configuration":{"separator":"-"}}`}, ErrFormat, "chunk_key_encoding"},
	{"unknown encoding", map[string]string{"chunk_key_encoding": `{"name":"fancy"}`}, ErrUnsupported, "chunk_key_encoding"},
	{"no fill", map[string]string{"fill_value": ""}, ErrFormat, "fill_value"},
	{"bad fill", map[string]string{"fill_value": `"NaN"`}, ErrFormat, "fill_value"},
	{"dim names length", map[string]string{"dimension_names": `["y"]`}, ErrFormat, "dimension_names"},
	{"no codecs", map[string]string{"codecs": ""}, ErrFormat, "codecs"},
	{"empty codecs", map[string]string{"codecs": `[]`}, ErrFormat, "codecs"},
	{"unknown codec", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},"fancy"]`}, ErrUnsupported, "codecs[1]"},
	{"no endian", map[string]string{"codecs": `["bytes"]`}, ErrFormat, "codecs[0]"},
	{"bad endian", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"middle"}}]`}, ErrFormat, "codecs[0]"},
	{"two array-to-bytes", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"bytes","configuration":{"endian":"little"}}]`}, ErrFormat, "codecs[1]"},
	{"bytes-to-bytes first", map[string]string{"codecs": `["crc32c",{"name":"bytes","configuration":{"endian":"little"}}]`}, ErrFormat, "codecs[0]"},
	{"transpose after bytes", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"transpose","configuration":{"order":[1,0]}}]`}, ErrFormat, "codecs[1]"},
	{"bad permutation", map[string]string{"codecs": `[{"name":"transpose","configuration":{"order":[0,0]}},{"name":"bytes","configuration":{"endian":"little"}}]`}, ErrFormat, "codecs[0]"},
	{"zstd level", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":99}}]`}, ErrFormat, "codecs[1]"},
	{"zstd unknown option", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"dict":"x"}}]`}, ErrFormat, "codecs[1]"},
	{"blosc cname", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lzma"}}]`}, ErrUnsupported, "codecs[1]"},
	{"blosc shuffle", map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","shuffle":"twist"}}]`}, ErrFormat, "codecs[1]"},
	{"extension without name", map[string]string{"codecs": `[{"configuration":{}}]`}, ErrFormat, ""},
	{"inner chunk does not divide", map[string]string{"codecs": `[` + strings.Replace(shard, `[2,4]`, `[3,4]`, 1) + `]`}, ErrFormat, "codecs[0].configuration.chunk_shape"},
	{"inner unknown codec", map[string]string{"codecs": `[` + strings.Replace(shard, `"codecs":[{"name":"bytes"`, `"codecs":[{"name":"fancy"`, 1) + `]`}, ErrUnsupported, "codecs[0].configuration.codecs[0]"},
	{"index codec zstd", map[string]string{"codecs": `[` + strings.Replace(shard, `{"name":"crc32c"}`, `{"name":"zstd","configuration":{"level":1}}`, 1) + `]`}, ErrUnsupported, "codecs[0].configuration.index_codecs[1]"},
	{"index location", map[string]string{"codecs": `[` + strings.Replace(shard, `"index_codecs"`, `"index_location":"middle","index_codecs"`, 1) + `]`}, ErrFormat, "codecs[0].configuration.index_location"},
	{"malformed JSON", map[string]string{"shape": `"ten"`}, ErrFormat, ""},
}

func TestValidateV3(t *testing.T) {
	for _, tt := range v3Tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := v3Doc(t, tt.repl)
			m, err := ParseArrayMetadataV3(doc)
			if err == nil {
				err = m.Validate()
			}
			checkMetaErr(t, err, tt.err, tt.field)
		})
	}
}

// checkMetaErr checks that err is nil when want is, else a *MetadataError
// wrapping want for field.
func checkMetaErr(t *testing.T, err, want error, field string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		return
	}
	var me *MetadataError
	if !errors.As(err, &me) || !errors.Is(err, want) {
		t.Fatalf("got %v (%T), want a *MetadataError wrapping %v", err, err, want)
	}
	if field != "" && me.Field != field {
		t.Errorf("got field %q, want %q (error: %v)", me.Field, field, err)
	}
	if !strings.HasPrefix(err.Error(), "zarr: ") {
		t.Errorf("message %q lacks the package prefix", err)
	}
}

func v2Doc(t *testing.T, repl map[string]string) []byte {
	t.Helper()
	doc := map[string]json.RawMessage{
		"zarr_format": json.RawMessage(`2`),
		"shape":       json.RawMessage(`[10, 20]`),
		"chunks":      json.RawMessage(`[4, 8]`),
		"dtype":       json.RawMessage(`"<u2"`),
		"compressor":  json.RawMessage(`{"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0}`),
		"fill_value":  json.RawMessage(`0`),
		"order":       json.RawMessage(`"C"`),
		"filters":     json.RawMessage(`null`),
	}
	for k, v := range repl {
		if v == "" {
			delete(doc, k)
		} else {
			doc[k] = json.RawMessage(v)
		}
	}
	b, _ := json.Marshal(doc)
	return b
}

var v2Tests = []struct {
	name  string
	repl  map[string]string
	err   error
	field string
	chain string // the v3 chain it maps to, when valid
}{
	{"valid", nil, nil, "", "bytes -> blosc"},
	{"order F", map[string]string{"order": `"F"`}, nil, "", "transpose -> bytes -> blosc"},
	{"no compressor", map[string]string{"compressor": `null`}, nil, "", "bytes"},
	{"zstd", map[string]string{"compressor": `{"id":"zstd","level":1,"checksum":false}`}, nil, "", "bytes -> zstd"},
	{"lz4", map[string]string{"compressor": `{"id":"lz4","acceleration":1}`}, nil, "", "bytes -> lz4"},
	{"gzip", map[string]string{"compressor": `{"id":"gzip","level":1}`}, nil, "", "bytes -> gzip"},
	{"zlib", map[string]string{"compressor": `{"id":"zlib","level":1}`}, nil, "", "bytes -> zlib"},
	{"filters", map[string]string{"filters": `[{"id":"crc32c"},{"id":"zlib","level":1}]`}, nil, "", "bytes -> crc32c -> zlib -> blosc"},
	{"null fill", map[string]string{"fill_value": `null`}, nil, "", "bytes -> blosc"},
	{"separator", map[string]string{"dimension_separator": `"/"`}, nil, "", "bytes -> blosc"},
	{"big endian", map[string]string{"dtype": `">f8"`, "fill_value": `"NaN"`}, nil, "", "bytes -> blosc"},

	{"unknown filter", map[string]string{"filters": `[{"id":"delta","dtype":"<u2"}]`}, ErrUnsupported, "filters[0]", ""},
	{"unknown compressor", map[string]string{"compressor": `{"id":"lzma"}`}, ErrUnsupported, "compressor", ""},
	{"compressor without id", map[string]string{"compressor": `{"level":1}`}, ErrFormat, "", ""},
	{"structured", map[string]string{"dtype": `[["a","<u2"]]`}, ErrUnsupported, "dtype", ""},
	{"datetime", map[string]string{"dtype": `"<M8[ns]"`}, ErrUnsupported, "dtype", ""},
	{"order K", map[string]string{"order": `"K"`}, ErrFormat, "order", ""},
	{"chunks rank", map[string]string{"chunks": `[4]`}, ErrFormat, "chunks", ""},
	{"format 3", map[string]string{"zarr_format": `3`}, ErrFormat, "zarr_format", ""},
	{"bad fill", map[string]string{"fill_value": `"x"`}, ErrFormat, "fill_value", ""},
	{"bad separator", map[string]string{"dimension_separator": `"-"`}, ErrFormat, "dimension_separator", ""},
	{"bad blosc", map[string]string{"compressor": `{"id":"blosc","cname":"lz4","shuffle":7}`}, ErrFormat, "compressor", ""},
}

func TestValidateV2(t *testing.T) {
	for _, tt := range v2Tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseArrayMetadataV2(v2Doc(t, tt.repl))
			if err == nil {
				err = m.Validate()
			}
			checkMetaErr(t, err, tt.err, tt.field)
			if err == nil {
				info, _ := m.resolve("")
				if got := info.codec.String(); got != tt.chain {
					t.Errorf("chain %q, want %q", got, tt.chain)
				}
			}
		})
	}
}

func TestKeyEncoding(t *testing.T) {
	for _, tt := range []struct {
		k    keyEncoding
		g    []int64
		want string
	}{
		{keyEncoding{sep: '/'}, []int64{1, 23, 45}, "c/1/23/45"},
		{keyEncoding{sep: '.'}, []int64{1, 23, 45}, "c.1.23.45"},
		{keyEncoding{sep: '/'}, nil, "c"},
		{keyEncoding{v2: true, sep: '.'}, []int64{1, 23, 45}, "1.23.45"},
		{keyEncoding{v2: true, sep: '/'}, []int64{0, 7}, "0/7"},
		{keyEncoding{v2: true, sep: '.'}, nil, "0"},
	} {
		if got := tt.k.key(tt.g); got != tt.want {
			t.Errorf("%+v.key(%v) = %q, want %q", tt.k, tt.g, got, tt.want)
		}
	}
}

// TestExtensionJSON checks both forms of extension values and that
// MarshalJSON writes what UnmarshalJSON reads.
func TestExtensionJSON(t *testing.T) {
	for _, in := range []string{
		`"zstd"`,
		`{"name":"zstd","configuration":{"level":3}}`,
		`{"name":"x","must_understand":false}`,
	} {
		var e Extension
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			t.Fatalf("Unmarshal(%s): %v", in, err)
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back Extension
		if err := json.Unmarshal(out, &back); err != nil || back.Name != e.Name || back.MustUnderstand != e.MustUnderstand || string(back.Configuration) != string(e.Configuration) {
			t.Errorf("round trip of %s through %s gave %+v, %v", in, out, back, err)
		}
	}
	for _, in := range []string{`{}`, `{"name":"x","extra":1}`, `3`, `null`} {
		var e Extension
		if err := json.Unmarshal([]byte(in), &e); err == nil {
			t.Errorf("Unmarshal(%s) succeeded: %+v", in, e)
		}
	}
}
