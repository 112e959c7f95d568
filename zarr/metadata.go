package zarr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Metadata document names.
const (
	v3MetaKey  = "zarr.json"
	v2ArrayKey = ".zarray"
	v2GroupKey = ".zgroup"
	v2AttrsKey = ".zattrs"
	maxRank    = 32 // NumPy's limit; a bound for hostile metadata
)

// Extension is a zarr v3 extension-point value (a data type, chunk grid,
// chunk key encoding, codec or storage transformer): either a bare name
// string or an object {"name", "configuration", "must_understand"}.
type Extension struct {
	Name           string          // the extension's name, e.g. "zstd"
	Configuration  json.RawMessage // the configuration object; nil when absent
	MustUnderstand bool            // false only when the document says "must_understand": false
}

// UnmarshalJSON accepts both the bare-string and the object form.
func (e *Extension) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var name string
		if err := json.Unmarshal(b, &name); err != nil {
			return err
		}
		*e = Extension{Name: name, MustUnderstand: true}
		return nil
	}
	var obj struct {
		Name           *string         `json:"name"`
		Configuration  json.RawMessage `json:"configuration"`
		MustUnderstand *bool           `json:"must_understand"`
	}
	if err := decodeStrict(b, &obj); err != nil {
		return err
	}
	if obj.Name == nil {
		return malformed("extension object without a name")
	}
	*e = Extension{Name: *obj.Name, Configuration: obj.Configuration, MustUnderstand: obj.MustUnderstand == nil || *obj.MustUnderstand}
	if isNull(e.Configuration) {
		e.Configuration = nil
	}
	return nil
}

// MarshalJSON writes the object form; "configuration" and
// "must_understand" appear only when set.
func (e Extension) MarshalJSON() ([]byte, error) {
	obj := struct {
		Name           string          `json:"name"`
		Configuration  json.RawMessage `json:"configuration,omitempty"`
		MustUnderstand *bool           `json:"must_understand,omitempty"`
	}{Name: e.Name, Configuration: e.Configuration}
	if !e.MustUnderstand {
		f := false
		obj.MustUnderstand = &f
	}
	return json.Marshal(obj)
}

// ArrayMetadataV3 is a zarr v3 array's zarr.json document.
type ArrayMetadataV3 struct {
	ZarrFormat          int             `json:"zarr_format"`
	NodeType            string          `json:"node_type"`
	Shape               []int64         `json:"shape"`
	DataType            Extension       `json:"data_type"`
	ChunkGrid           Extension       `json:"chunk_grid"`
	ChunkKeyEncoding    Extension       `json:"chunk_key_encoding"`
	FillValue           json.RawMessage `json:"fill_value"`
	Codecs              []Extension     `json:"codecs"`
	Attributes          json.RawMessage `json:"attributes,omitempty"`
	StorageTransformers []Extension     `json:"storage_transformers,omitempty"`
	DimensionNames      []*string       `json:"dimension_names,omitempty"`

	// Extra holds the top-level fields this package does not know. Each
	// must be an object with "must_understand": false, or Validate fails.
	Extra map[string]json.RawMessage `json:"-"`
}

var v3ArrayFields = []string{"zarr_format", "node_type", "shape", "data_type", "chunk_grid",
	"chunk_key_encoding", "fill_value", "codecs", "attributes", "storage_transformers", "dimension_names"}

// ParseArrayMetadataV3 decodes a zarr.json document. It checks only that
// the JSON is well formed and the fields have the right JSON types; call
// Validate for the rest.
func ParseArrayMetadataV3(b []byte) (*ArrayMetadataV3, error) {
	var m ArrayMetadataV3
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, metaErr("", "", jsonReason(err))
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, metaErr("", "", jsonReason(err))
	}
	for k, v := range all {
		if !slices.Contains(v3ArrayFields, k) {
			if m.Extra == nil {
				m.Extra = map[string]json.RawMessage{}
			}
			m.Extra[k] = v
		}
	}
	return &m, nil
}

// Validate checks the document against the zarr v3 specification and this
// package's support: every error is a *MetadataError naming the field,
// wrapping ErrFormat or ErrUnsupported.
func (m *ArrayMetadataV3) Validate() error {
	_, err := m.resolve("")
	return err
}

// arrayInfo is what an array's metadata (v3 or v2) comes down to.
type arrayInfo struct {
	zarrFormat int
	shape      []int64
	gridChunk  []int64 // the chunk grid's chunk shape: the shard shape when sharded
	dtype      DataType
	fill       []byte // one element, little-endian
	keys       keyEncoding
	codec      *ChunkCodec // decodes one grid chunk
	dimNames   []string    // "" for unnamed dimensions; nil when absent
	attrs      json.RawMessage
}

func (m *ArrayMetadataV3) resolve(key string) (*arrayInfo, error) {
	fail := func(field string, err error) (*arrayInfo, error) {
		return nil, metaErr(key, field, err)
	}
	if m.ZarrFormat != 3 {
		return fail("zarr_format", malformed("zarr_format is %d, want 3", m.ZarrFormat))
	}
	if m.NodeType != "array" {
		return fail("node_type", malformed("node_type is %q, want \"array\"", m.NodeType))
	}
	for k, v := range m.Extra {
		var ext struct {
			MustUnderstand *bool `json:"must_understand"`
		}
		if json.Unmarshal(v, &ext) != nil || ext.MustUnderstand == nil || *ext.MustUnderstand {
			return fail(k, unsupported("field %q (not marked must_understand: false)", k))
		}
	}
	if m.Shape == nil {
		return fail("shape", malformed("shape is missing"))
	}
	if err := checkShape(m.Shape, 0); err != nil {
		return fail("shape", err)
	}
	rank := len(m.Shape)

	dt, err := parseDataTypeExt(m.DataType)
	if err != nil {
		return fail("data_type", err)
	}

	if m.ChunkGrid.Name != "regular" {
		if m.ChunkGrid.Name == "" {
			return fail("chunk_grid", malformed("chunk_grid is missing"))
		}
		return fail("chunk_grid.name", unsupported("chunk grid %q", m.ChunkGrid.Name))
	}
	var grid struct {
		ChunkShape []int64 `json:"chunk_shape"`
	}
	if err := decodeStrict(m.ChunkGrid.Configuration, &grid); err != nil {
		return fail("chunk_grid.configuration", jsonReason(err))
	}
	if len(grid.ChunkShape) != rank {
		return fail("chunk_grid.configuration.chunk_shape", malformed("chunk_shape has %d dimensions, shape has %d", len(grid.ChunkShape), rank))
	}
	if err := checkShape(grid.ChunkShape, 1); err != nil {
		return fail("chunk_grid.configuration.chunk_shape", err)
	}

	keys, err := parseKeyEncoding(m.ChunkKeyEncoding)
	if err != nil {
		return fail("chunk_key_encoding", err)
	}

	if m.FillValue == nil {
		return fail("fill_value", malformed("fill_value is missing"))
	}
	fill, err := parseFill(m.FillValue, dt, false)
	if err != nil {
		return fail("fill_value", err)
	}

	for i, st := range m.StorageTransformers {
		if st.MustUnderstand {
			return fail(fmt.Sprintf("storage_transformers[%d]", i), unsupported("storage transformer %q", st.Name))
		}
	}

	var dimNames []string
	if m.DimensionNames != nil {
		if len(m.DimensionNames) != rank {
			return fail("dimension_names", malformed("%d dimension names for %d dimensions", len(m.DimensionNames), rank))
		}
		dimNames = make([]string, rank)
		for i, n := range m.DimensionNames {
			if n != nil {
				dimNames[i] = *n
			}
		}
	}

	if m.Codecs == nil {
		return fail("codecs", malformed("codecs is missing"))
	}
	specs := make([]codecSpec, len(m.Codecs))
	for i, c := range m.Codecs {
		specs[i] = codecSpec{name: c.Name, config: c.Configuration, field: fmt.Sprintf("codecs[%d]", i)}
	}
	codec, err := parseChain(specs, grid.ChunkShape, dt, fill)
	if err != nil {
		return nil, withKey(err, key)
	}
	if m.Attributes != nil && !isNull(m.Attributes) && !isObject(m.Attributes) {
		return fail("attributes", malformed("attributes is not an object"))
	}
	return &arrayInfo{
		zarrFormat: 3,
		shape:      slices.Clone(m.Shape),
		gridChunk:  slices.Clone(grid.ChunkShape),
		dtype:      dt,
		fill:       fill,
		keys:       keys,
		codec:      codec,
		dimNames:   dimNames,
		attrs:      m.Attributes,
	}, nil
}

func parseDataTypeExt(e Extension) (DataType, error) {
	if e.Name == "" {
		return 0, malformed("data_type is missing")
	}
	if !isEmptyConfig(e.Configuration) {
		return 0, unsupported("data type %q with a configuration", e.Name)
	}
	for t := Bool; t <= Float64; t++ {
		if dataTypeNames[t] == e.Name {
			return t, nil
		}
	}
	return 0, unsupported("data type %q", e.Name)
}

// checkShape checks a shape or chunk shape: at most maxRank dimensions,
// each at least min, and a product that fits an int64.
func checkShape(s []int64, min int64) error {
	if len(s) > maxRank {
		return unsupported("rank %d (at most %d)", len(s), maxRank)
	}
	prod := int64(1)
	for i, n := range s {
		if n < min {
			return malformed("dimension %d is %d, want at least %d", i, n, min)
		}
		if n != 0 && prod > math.MaxInt64/n {
			return malformed("the number of elements overflows int64")
		}
		prod *= n
	}
	return nil
}

// keyEncoding turns chunk grid coordinates into store keys.
type keyEncoding struct {
	v2  bool // "v2" encoding: indices joined by sep, "0" for 0-d
	sep byte // '/' or '.'
}

func parseKeyEncoding(e Extension) (keyEncoding, error) {
	var cfg struct {
		Separator *string `json:"separator"`
	}
	if err := decodeStrict(e.Configuration, &cfg); err != nil {
		return keyEncoding{}, jsonReason(err)
	}
	var k keyEncoding
	switch e.Name {
	case "default":
		k = keyEncoding{sep: '/'}
	case "v2":
		k = keyEncoding{v2: true, sep: '.'}
	case "":
		return k, malformed("chunk_key_encoding is missing")
	default:
		return k, unsupported("chunk key encoding %q", e.Name)
	}
	if cfg.Separator != nil {
		switch *cfg.Separator {
		case "/":
			k.sep = '/'
		case ".":
			k.sep = '.'
		default:
			return k, malformed("separator %q is neither \"/\" nor \".\"", *cfg.Separator)
		}
	}
	return k, nil
}

// key returns the store key of the chunk at grid coordinate c, relative to
// the array.
func (k keyEncoding) key(c []int64) string {
	var b strings.Builder
	if !k.v2 {
		b.WriteByte('c')
		for _, i := range c {
			b.WriteByte(k.sep)
			b.WriteString(strconv.FormatInt(i, 10))
		}
		return b.String()
	}
	if len(c) == 0 {
		return "0"
	}
	for j, i := range c {
		if j > 0 {
			b.WriteByte(k.sep)
		}
		b.WriteString(strconv.FormatInt(i, 10))
	}
	return b.String()
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func isObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

func isEmptyConfig(b json.RawMessage) bool {
	if b == nil || isNull(b) {
		return true
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && len(m) == 0
}

// decodeStrict decodes a JSON object into v, refusing unknown fields and
// trailing data. An absent (nil) or null configuration decodes as {}.
func decodeStrict(b json.RawMessage, v any) error {
	if b == nil || isNull(b) {
		b = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return malformed("trailing data after the JSON value")
	}
	return nil
}

// decodeLenient decodes a JSON object into v, ignoring unknown fields (for
// numcodecs configurations, whose extra fields are encoder settings).
func decodeLenient(b json.RawMessage, v any) error {
	if b == nil || isNull(b) {
		return nil
	}
	return json.Unmarshal(b, v)
}

// jsonReason turns an encoding/json error into a reason wrapping
// ErrFormat; reasons pass through.
func jsonReason(err error) error {
	if _, ok := err.(*reason); ok {
		return err
	}
	return &reason{kind: ErrFormat, msg: "invalid JSON", cause: err}
}
