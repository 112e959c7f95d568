package writer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// namedConfig is a zarr v3 extension value: a name and its configuration.
type namedConfig struct {
	Name          string `json:"name"`
	Configuration any    `json:"configuration,omitempty"`
}

// arrayV3 is zarr.json of a v3 array, fields in the order written.
type arrayV3 struct {
	ZarrFormat       int             `json:"zarr_format"`
	NodeType         string          `json:"node_type"`
	Shape            []int64         `json:"shape"`
	DataType         string          `json:"data_type"`
	ChunkGrid        namedConfig     `json:"chunk_grid"`
	ChunkKeyEncoding namedConfig     `json:"chunk_key_encoding"`
	FillValue        json.RawMessage `json:"fill_value"`
	Codecs           []namedConfig   `json:"codecs"`
	Attributes       json.RawMessage `json:"attributes,omitempty"`
	DimensionNames   []string        `json:"dimension_names,omitempty"`
}

// arrayV2 is .zarray of a v2 array.
type arrayV2 struct {
	ZarrFormat         int             `json:"zarr_format"`
	Shape              []int64         `json:"shape"`
	Chunks             []int64         `json:"chunks"`
	Dtype              string          `json:"dtype"`
	Compressor         any             `json:"compressor"`
	FillValue          json.RawMessage `json:"fill_value"`
	Order              string          `json:"order"`
	Filters            any             `json:"filters"`
	DimensionSeparator string          `json:"dimension_separator"`
}

// Codec configurations, as zarr-python and numcodecs spell them.
type (
	bytesConfig struct {
		Endian string `json:"endian"`
	}
	transposeConfig struct {
		Order []int `json:"order"`
	}
	zstdConfig struct {
		Level    int  `json:"level"`
		Checksum bool `json:"checksum"`
	}
	levelConfig struct {
		Level int `json:"level"`
	}
	lz4Config struct {
		Acceleration int `json:"acceleration"`
	}
	bloscConfigV3 struct {
		Typesize  int    `json:"typesize"`
		Cname     string `json:"cname"`
		Clevel    int    `json:"clevel"`
		Shuffle   string `json:"shuffle"`
		Blocksize int    `json:"blocksize"`
	}
	shardingConfig struct {
		ChunkShape    []int64       `json:"chunk_shape"`
		Codecs        []namedConfig `json:"codecs"`
		IndexCodecs   []namedConfig `json:"index_codecs"`
		IndexLocation string        `json:"index_location"`
	}
	zstdConfigV2 struct {
		ID       string `json:"id"`
		Level    int    `json:"level"`
		Checksum bool   `json:"checksum,omitempty"` // tensorstore rejects the member
	}
	levelConfigV2 struct {
		ID    string `json:"id"`
		Level int    `json:"level"`
	}
	lz4ConfigV2 struct {
		ID           string `json:"id"`
		Acceleration int    `json:"acceleration"`
	}
	bloscConfigV2 struct {
		ID        string `json:"id"`
		Cname     string `json:"cname"`
		Clevel    int    `json:"clevel"`
		Shuffle   int    `json:"shuffle"`
		Blocksize int    `json:"blocksize"`
	}
)

// metadata returns the array's metadata documents: file name and contents.
func (l *layout) metadata() (map[string][]byte, error) {
	s := &l.spec
	fill := l.fillJSON()
	files := make(map[string][]byte, 2)
	var doc any
	if s.Format == 2 {
		name := ".zarray"
		doc = arrayV2{
			ZarrFormat:         2,
			Shape:              s.Shape,
			Chunks:             s.ChunkShape,
			Dtype:              l.typestr(),
			Compressor:         l.compressorV2(),
			FillValue:          fill,
			Order:              string(s.Order),
			DimensionSeparator: s.Separator,
		}
		b, err := marshal(doc)
		if err != nil {
			return nil, err
		}
		files[name] = b
		if l.attrs != nil {
			files[".zattrs"] = l.attrs
		}
		return files, nil
	}
	keys := namedConfig{Name: "default", Configuration: map[string]string{"separator": s.Separator}}
	if s.V2Keys {
		keys.Name = "v2"
	}
	doc = arrayV3{
		ZarrFormat:       3,
		NodeType:         "array",
		Shape:            s.Shape,
		DataType:         s.DataType.String(),
		ChunkGrid:        namedConfig{Name: "regular", Configuration: map[string][]int64{"chunk_shape": l.block}},
		ChunkKeyEncoding: keys,
		FillValue:        fill,
		Codecs:           l.codecsV3(),
		Attributes:       l.attrs,
		DimensionNames:   s.DimensionNames,
	}
	b, err := marshal(doc)
	if err != nil {
		return nil, err
	}
	files["zarr.json"] = b
	return files, nil
}

// codecsV3 is the array's v3 codec chain.
func (l *layout) codecsV3() []namedConfig {
	s := &l.spec
	var chain []namedConfig
	if s.Order == 'F' {
		order := make([]int, len(s.Shape))
		for i := range order {
			order[i] = len(order) - 1 - i
		}
		chain = append(chain, namedConfig{Name: "transpose", Configuration: transposeConfig{Order: order}})
	}
	chain = append(chain, bytesCodec(l.ti, s.BigEndian))
	c := s.Compression
	switch c.Codec {
	case Zstd:
		chain = append(chain, namedConfig{Name: "zstd", Configuration: zstdConfig{Level: c.Level, Checksum: c.Checksum}})
	case Gzip:
		chain = append(chain, namedConfig{Name: "gzip", Configuration: levelConfig{Level: c.Level}})
	case LZ4:
		chain = append(chain, namedConfig{Name: "numcodecs.lz4", Configuration: lz4Config{Acceleration: lz4Acceleration(c)}})
	case Blosc:
		chain = append(chain, namedConfig{Name: "blosc", Configuration: bloscConfigV3{
			Typesize:  l.ti.size,
			Cname:     c.BloscCompressor.String(),
			Clevel:    c.Level,
			Shuffle:   c.Shuffle.String(),
			Blocksize: c.Blocksize,
		}})
	}
	if !l.sharded {
		return chain
	}
	where := "end"
	if s.IndexAtStart {
		where = "start"
	}
	return []namedConfig{{Name: "sharding_indexed", Configuration: shardingConfig{
		ChunkShape:    s.ChunkShape,
		Codecs:        chain,
		IndexCodecs:   []namedConfig{bytesCodec(typeInfo{size: 8}, false), {Name: "crc32c"}},
		IndexLocation: where,
	}}}
}

// bytesCodec is the bytes codec for elements of ti. Like zarr-python, it
// leaves out the endian of 1-byte types, which have none.
func bytesCodec(ti typeInfo, big bool) namedConfig {
	switch {
	case ti.size == 1:
		return namedConfig{Name: "bytes"}
	case big:
		return namedConfig{Name: "bytes", Configuration: bytesConfig{Endian: "big"}}
	}
	return namedConfig{Name: "bytes", Configuration: bytesConfig{Endian: "little"}}
}

// compressorV2 is the .zarray compressor, or nil for none.
func (l *layout) compressorV2() any {
	c := l.spec.Compression
	switch c.Codec {
	case Zstd:
		return zstdConfigV2{ID: "zstd", Level: c.Level, Checksum: c.Checksum}
	case Gzip:
		return levelConfigV2{ID: "gzip", Level: c.Level}
	case Zlib:
		return levelConfigV2{ID: "zlib", Level: c.Level}
	case LZ4:
		return lz4ConfigV2{ID: "lz4", Acceleration: lz4Acceleration(c)}
	case Blosc:
		// blosc.Shuffle's values are numcodecs' shuffle codes.
		return bloscConfigV2{ID: "blosc", Cname: c.BloscCompressor.String(), Clevel: c.Level,
			Shuffle: int(c.Shuffle), Blocksize: c.Blocksize}
	}
	return nil
}

func lz4Acceleration(c Compression) int { return max(c.Level, 1) }

// typestr is the v2 dtype: byte order, kind, size ("<u2", "|b1").
func (l *layout) typestr() string {
	order := byte('<')
	switch {
	case l.ti.size == 1:
		order = '|'
	case l.spec.BigEndian:
		order = '>'
	}
	return fmt.Sprintf("%c%c%d", order, l.ti.v2, l.ti.size)
}

// fillJSON is the fill_value as JSON. Floats are written so that parsing
// the text as float64 and rounding to the type gives back the bit pattern:
// the named values, -0.0, then a hex pattern (v3) for any other NaN.
func (l *layout) fillJSON() json.RawMessage {
	ti, p := l.ti, l.fill
	var s string
	switch ti.kind {
	case kindBool:
		s = strconv.FormatBool(p != 0)
	case kindInt:
		s = strconv.FormatInt(ti.signExtend(p), 10)
	case kindUint:
		s = strconv.FormatUint(p, 10)
	case kindFloat:
		f := ti.toFloat64(p)
		switch {
		case p == ti.canonicalNaN():
			s = `"NaN"`
		case math.IsNaN(f):
			s = fmt.Sprintf(`"0x%0*x"`, 2*ti.size, p) // validation kept these out of v2
		case math.IsInf(f, 1):
			s = `"Infinity"`
		case math.IsInf(f, -1):
			s = `"-Infinity"`
		case f == 0 && math.Signbit(f):
			s = "-0.0"
		default:
			s = strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	return json.RawMessage(s)
}

// marshal encodes a metadata document: indented, one trailing newline, and
// without encoding/json's HTML escapes ("<u2" stays "<u2").
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("writer: encoding metadata: %w", err)
	}
	return b.Bytes(), nil
}
