package zarr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// ArrayMetadataV2 is a zarr v2 array's .zarray document.
type ArrayMetadataV2 struct {
	ZarrFormat         int             `json:"zarr_format"`
	Shape              []int64         `json:"shape"`
	Chunks             []int64         `json:"chunks"`
	DType              json.RawMessage `json:"dtype"`      // a NumPy typestr; structured dtypes are lists
	Compressor         *CodecConfigV2  `json:"compressor"` // nil when null
	FillValue          json.RawMessage `json:"fill_value"`
	Order              string          `json:"order"`
	Filters            []CodecConfigV2 `json:"filters"` // nil when null
	DimensionSeparator string          `json:"dimension_separator,omitempty"`
}

// CodecConfigV2 is a numcodecs codec configuration, as zarr v2 stores
// compressors and filters: a flat object whose "id" names the codec.
type CodecConfigV2 struct {
	ID     string          // the numcodecs codec id, e.g. "blosc"
	Config json.RawMessage // the whole object, "id" included
}

// UnmarshalJSON reads the object and its "id".
func (c *CodecConfigV2) UnmarshalJSON(b []byte) error {
	var obj struct {
		ID *string `json:"id"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	if obj.ID == nil {
		return malformed("codec object without an id")
	}
	*c = CodecConfigV2{ID: *obj.ID, Config: slices.Clone(b)}
	return nil
}

// MarshalJSON writes Config, which holds the id.
func (c CodecConfigV2) MarshalJSON() ([]byte, error) {
	if c.Config == nil {
		return json.Marshal(map[string]string{"id": c.ID})
	}
	return c.Config, nil
}

// ParseArrayMetadataV2 decodes a .zarray document. It checks only that the
// JSON is well formed; call Validate for the rest.
func ParseArrayMetadataV2(b []byte) (*ArrayMetadataV2, error) {
	var m ArrayMetadataV2
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, metaErr("", "", jsonReason(err))
	}
	return &m, nil
}

// Validate checks the document against the zarr v2 specification and this
// package's support: every error is a *MetadataError naming the field,
// wrapping ErrFormat or ErrUnsupported.
func (m *ArrayMetadataV2) Validate() error {
	_, err := m.resolve("")
	return err
}

func (m *ArrayMetadataV2) resolve(key string) (*arrayInfo, error) {
	fail := func(field string, err error) (*arrayInfo, error) {
		return nil, metaErr(key, field, err)
	}
	if m.ZarrFormat != 2 {
		return fail("zarr_format", malformed("zarr_format is %d, want 2", m.ZarrFormat))
	}
	if m.Shape == nil {
		return fail("shape", malformed("shape is missing"))
	}
	if err := checkShape(m.Shape, 0); err != nil {
		return fail("shape", err)
	}
	if len(m.Chunks) != len(m.Shape) {
		return fail("chunks", malformed("chunks has %d dimensions, shape has %d", len(m.Chunks), len(m.Shape)))
	}
	if err := checkShape(m.Chunks, 1); err != nil {
		return fail("chunks", err)
	}
	var typestr string
	if err := json.Unmarshal(m.DType, &typestr); err != nil {
		if len(bytes.TrimSpace(m.DType)) > 0 && bytes.TrimSpace(m.DType)[0] == '[' {
			return fail("dtype", unsupported("structured dtype"))
		}
		return fail("dtype", malformed("dtype is not a string"))
	}
	dt, endian, err := parseTypestr(typestr)
	if err != nil {
		return fail("dtype", err)
	}
	fill, err := parseFill(m.FillValue, dt, true)
	if err != nil {
		return fail("fill_value", err)
	}
	keys := keyEncoding{v2: true, sep: '.'}
	switch m.DimensionSeparator {
	case "", ".":
	case "/":
		keys.sep = '/'
	default:
		return fail("dimension_separator", malformed("dimension_separator %q is neither \".\" nor \"/\"", m.DimensionSeparator))
	}

	// The v3 chain equivalent to a v2 array: [transpose for order F],
	// bytes with the dtype's byte order, the filters in order, then the
	// compressor.
	var specs []codecSpec
	switch m.Order {
	case "C":
	case "F":
		if len(m.Shape) > 1 {
			order := make([]int, len(m.Shape))
			for i := range order {
				order[i] = len(order) - 1 - i
			}
			cfg, _ := json.Marshal(map[string][]int{"order": order})
			specs = append(specs, codecSpec{name: "transpose", config: cfg, field: "order"})
		}
	default:
		return fail("order", malformed("order %q is neither \"C\" nor \"F\"", m.Order))
	}
	bytesCfg, _ := json.Marshal(map[string]string{"endian": endian.String()})
	specs = append(specs, codecSpec{name: "bytes", config: bytesCfg, field: "dtype"})
	for i, f := range m.Filters {
		specs = append(specs, codecSpec{name: "numcodecs." + f.ID, config: f.Config, field: fmt.Sprintf("filters[%d]", i), v2: true})
	}
	if m.Compressor != nil {
		specs = append(specs, codecSpec{name: "numcodecs." + m.Compressor.ID, config: m.Compressor.Config, field: "compressor", v2: true})
	}
	codec, err := parseChain(specs, m.Chunks, dt, fill)
	if err != nil {
		return nil, withKey(err, key)
	}
	return &arrayInfo{
		zarrFormat: 2,
		shape:      slices.Clone(m.Shape),
		gridChunk:  slices.Clone(m.Chunks),
		dtype:      dt,
		fill:       fill,
		keys:       keys,
		codec:      codec,
	}, nil
}
