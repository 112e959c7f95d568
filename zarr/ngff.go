package zarr

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Multiscale is an OME-NGFF image: a group whose metadata lists the
// resolution levels of one image, full resolution first. Versions 0.4
// (zarr v2, "multiscales" in .zattrs) and 0.5 (zarr v3, "ome" in the
// group's attributes) are read. When a group has several multiscales
// entries, the first is used.
type Multiscale struct {
	store   Store
	path    string
	key     string // key of the metadata document holding the multiscales
	version string
	name    string
	axes    []Axis
	levels  []Level
}

// Axis is one axis of a multiscale image.
type Axis struct {
	Name string // unique within the image, e.g. "z"
	Type string // "space", "time", "channel", a custom type, or ""
	Unit string // a UDUNITS-2 unit such as "micrometer", or ""
}

// Level is one resolution level of a multiscale image. A voxel index i
// along axis k maps to the physical coordinate i*Scale[k] +
// Translation[k]; the multiscale's own coordinate transformations, if
// any, are already folded in.
type Level struct {
	Path        string    // the level array's path, relative to the image group
	Scale       []float64 // one entry per axis
	Translation []float64 // one entry per axis; zeros when the metadata has none
}

// OpenNGFF opens the OME-NGFF image in the local directory path.
func OpenNGFF(path string) (*Multiscale, error) {
	s, err := NewDirStore(path)
	if err != nil {
		return nil, err
	}
	return OpenNGFFStore(s, "")
}

// OpenNGFFStore opens the OME-NGFF image at path ("" for the root) in s.
// A bioformats2raw container (a group with "bioformats2raw.layout": 3 and
// no multiscales) opens its first image, "0". A group without multiscales
// fails with ErrNotFound; malformed or unsupported metadata with a
// *MetadataError.
func OpenNGFFStore(s Store, path string) (*Multiscale, error) {
	p, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	n, err := readNode(s, p)
	if err != nil {
		return nil, err
	}
	if n.kind != NodeGroup {
		return nil, fmt.Errorf("zarr: %s: %w: no OME-NGFF image here (found an array)", n.key, ErrNotFound)
	}
	ms, ok, err := multiscalesAttr(n)
	if err != nil {
		return nil, err
	}
	if !ok {
		var b2r struct {
			Layout *int `json:"bioformats2raw.layout"`
		}
		if n.attrs != nil && json.Unmarshal(n.attrs, &b2r) == nil && b2r.Layout != nil && *b2r.Layout == 3 {
			return OpenNGFFStore(s, joinKey(p, "0"))
		}
		return nil, fmt.Errorf("zarr: %s: %w: the group has no OME-NGFF multiscales", n.key, ErrNotFound)
	}
	m, err := parseMultiscale(ms, n.attrsKey)
	if err != nil {
		return nil, err
	}
	m.store, m.path = s, p
	return m, nil
}

// multiscales is what a group's attributes say about OME-NGFF.
type multiscales struct {
	version string            // "0.4" or "0.5"
	entries []json.RawMessage // the multiscales list
	field   string            // JSON path of the list, for errors
}

// multiscalesAttr finds the multiscales list of a group node: in
// attributes.ome for zarr v3, in .zattrs for zarr v2.
func multiscalesAttr(n *node) (*multiscales, bool, error) {
	if n.attrs == nil || isNull(n.attrs) {
		return nil, false, nil
	}
	attrKey := n.attrsKey
	var attrs struct {
		OME         json.RawMessage   `json:"ome"`
		Multiscales []json.RawMessage `json:"multiscales"`
	}
	if err := json.Unmarshal(n.attrs, &attrs); err != nil {
		field := "attributes"
		if n.format == 2 {
			field = "" // the whole .zattrs document
		}
		return nil, false, metaErr(attrKey, field, jsonReason(err))
	}
	if n.format == 3 {
		if attrs.OME == nil {
			return nil, false, nil
		}
		var ome struct {
			Version     string            `json:"version"`
			Multiscales []json.RawMessage `json:"multiscales"`
		}
		if err := json.Unmarshal(attrs.OME, &ome); err != nil {
			return nil, false, metaErr(attrKey, "attributes.ome", jsonReason(err))
		}
		if ome.Multiscales == nil {
			return nil, false, nil
		}
		if ome.Version != "0.5" {
			return nil, false, metaErr(attrKey, "attributes.ome.version", unsupported("OME-NGFF version %q (want 0.5 over zarr v3)", ome.Version))
		}
		return &multiscales{version: ome.Version, entries: ome.Multiscales, field: "attributes.ome.multiscales"}, true, nil
	}
	if attrs.Multiscales == nil {
		return nil, false, nil
	}
	return &multiscales{version: "0.4", entries: attrs.Multiscales, field: "multiscales"}, true, nil
}

type ngffTransform struct {
	Type        string    `json:"type"`
	Scale       []float64 `json:"scale"`
	Translation []float64 `json:"translation"`
	Path        *string   `json:"path"`
}

// parseMultiscale parses and validates the first multiscales entry.
func parseMultiscale(ms *multiscales, key string) (*Multiscale, error) {
	fail := func(field string, err error) (*Multiscale, error) {
		return nil, metaErr(key, ms.field+field, err)
	}
	if len(ms.entries) == 0 {
		return fail("", malformed("empty multiscales list"))
	}
	var e struct {
		Version  *string         `json:"version"`
		Name     string          `json:"name"`
		Axes     json.RawMessage `json:"axes"`
		Datasets []struct {
			Path       *string         `json:"path"`
			Transforms []ngffTransform `json:"coordinateTransformations"`
		} `json:"datasets"`
		Transforms []ngffTransform `json:"coordinateTransformations"`
	}
	if err := json.Unmarshal(ms.entries[0], &e); err != nil {
		return fail("[0]", jsonReason(err))
	}
	if ms.version == "0.4" {
		v := ""
		if e.Version != nil {
			v = *e.Version
		}
		if v != "0.4" {
			return fail("[0].version", unsupported("OME-NGFF version %q (want 0.4 over zarr v2, 0.5 over zarr v3)", v))
		}
	}
	var axes []struct {
		Name *string `json:"name"`
		Type string  `json:"type"`
		Unit string  `json:"unit"`
	}
	if err := json.Unmarshal(e.Axes, &axes); err != nil || axes == nil {
		return fail("[0].axes", malformed("axes is not a list of axis objects"))
	}
	if len(axes) < 2 || len(axes) > 5 {
		return fail("[0].axes", malformed("%d axes, want 2 to 5", len(axes)))
	}
	m := &Multiscale{key: key, version: ms.version, name: e.Name}
	for i, a := range axes {
		if a.Name == nil || *a.Name == "" {
			return fail(fmt.Sprintf("[0].axes[%d]", i), malformed("axis without a name"))
		}
		if slices.ContainsFunc(m.axes, func(x Axis) bool { return x.Name == *a.Name }) {
			return fail(fmt.Sprintf("[0].axes[%d]", i), malformed("duplicate axis name %q", *a.Name))
		}
		m.axes = append(m.axes, Axis{Name: *a.Name, Type: a.Type, Unit: a.Unit})
	}
	rank := len(m.axes)
	gScale, gTrans, err := parseTransforms(e.Transforms, rank, true)
	if err != nil {
		return fail("[0].coordinateTransformations", err)
	}
	if len(e.Datasets) == 0 {
		return fail("[0].datasets", malformed("no datasets"))
	}
	for i, d := range e.Datasets {
		f := fmt.Sprintf("[0].datasets[%d]", i)
		if d.Path == nil {
			return fail(f+".path", malformed("dataset without a path"))
		}
		p, err := cleanPath(*d.Path)
		if err != nil || p == "" {
			return fail(f+".path", malformed("dataset path %q is not a relative path", *d.Path))
		}
		scale, trans, err := parseTransforms(d.Transforms, rank, false)
		if err != nil {
			return fail(f+".coordinateTransformations", err)
		}
		// physical = (i*scale + trans)*gScale + gTrans
		for k := range rank {
			trans[k] = trans[k]*gScale[k] + gTrans[k]
			scale[k] *= gScale[k]
		}
		m.levels = append(m.levels, Level{Path: p, Scale: scale, Translation: trans})
	}
	return m, nil
}

// parseTransforms reads a coordinateTransformations list: one scale, then
// optionally one translation. An absent list is allowed only where
// optional is set, and means identity.
func parseTransforms(ts []ngffTransform, rank int, optional bool) (scale, trans []float64, err error) {
	scale = make([]float64, rank)
	trans = make([]float64, rank)
	for k := range scale {
		scale[k] = 1
	}
	if len(ts) == 0 {
		if optional {
			return scale, trans, nil
		}
		return nil, nil, malformed("no coordinate transformations (a scale is required)")
	}
	if len(ts) > 2 || ts[0].Type != "scale" || len(ts) == 2 && ts[1].Type != "translation" {
		types := make([]string, len(ts))
		for i, t := range ts {
			types[i] = t.Type
		}
		return nil, nil, malformed("transformations %q, want one scale optionally followed by one translation", types)
	}
	for i, t := range ts {
		if t.Path != nil {
			return nil, nil, unsupported("%s stored in a file (%q)", t.Type, *t.Path)
		}
		v, dst := t.Scale, scale
		if i == 1 {
			v, dst = t.Translation, trans
		}
		if len(v) != rank {
			return nil, nil, malformed("%s has %d entries for %d axes", t.Type, len(v), rank)
		}
		for k, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, nil, malformed("%s[%d] is not finite", t.Type, k)
			}
		}
		copy(dst, v)
	}
	return scale, trans, nil
}

// Version returns the OME-NGFF version, "0.4" or "0.5".
func (m *Multiscale) Version() string { return m.version }

// Name returns the multiscale's name, or "".
func (m *Multiscale) Name() string { return m.name }

// Path returns the image group's path within its store.
func (m *Multiscale) Path() string { return m.path }

// Axes returns the image's axes, in the arrays' axis order.
func (m *Multiscale) Axes() []Axis { return slices.Clone(m.axes) }

// Levels returns the resolution levels, full resolution first.
func (m *Multiscale) Levels() []Level {
	out := make([]Level, len(m.levels))
	for i, l := range m.levels {
		out[i] = Level{Path: l.Path, Scale: slices.Clone(l.Scale), Translation: slices.Clone(l.Translation)}
	}
	return out
}

// Level opens level k's array (0 is full resolution). Its rank must match
// the axes, and for OME-NGFF 0.5 its dimension_names, when present, must be
// the axis names.
func (m *Multiscale) Level(k int) (*Array, error) {
	if k < 0 || k >= len(m.levels) {
		return nil, fmt.Errorf("zarr: %s: level %d does not exist (the image has %d)", m.key, k, len(m.levels))
	}
	a, err := OpenStore(m.store, joinKey(m.path, m.levels[k].Path))
	if err != nil {
		return nil, err
	}
	if a.Rank() != len(m.axes) {
		return nil, metaErr(a.metaKey, "shape", malformed("level %d has %d dimensions, the image has %d axes", k, a.Rank(), len(m.axes)))
	}
	if names := a.DimensionNames(); m.version == "0.5" && names != nil {
		for i, ax := range m.axes {
			if names[i] != ax.Name {
				return nil, metaErr(a.metaKey, "dimension_names", malformed("dimension_names %q differ from the image axes", names))
			}
		}
	}
	return a, nil
}
