package pipeline

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Source is one tensor of every batch: where its array is found from a
// sample's URI, and its output type. A pipeline with several Sources reads
// one box from each for every sample (an image and its label, a mask,
// channels kept in separate arrays) and hands out one tensor per source.
//
// The first source is the primary: a sample's Box is in its array's axis
// order. Another source's array is matched to it by axis name (OME-NGFF
// axes, or zarr v3 dimension_names): each of its axes takes the box's range
// of the primary axis of the same name, in its own axis order, and an axis
// of the box it lacks is dropped (a zyx label beside a czyx image reads the
// image's z, y and x ranges). Without names on both sides the ranks must be
// equal and the axes are taken in order. Every sample's box must give a
// source the same shape.
type Source struct {
	// Name is the tensor's key in a batch ("image", "label"); unique.
	Name string `json:"name"`
	// Path locates the source's array from a sample's URI: "" is the
	// sample's own array or image; a relative path is joined to the URI
	// ("labels/nuclei", "../mask.zarr"); an absolute path or URI is used
	// as it is, for every sample.
	Path string `json:"path"`
	// Label names an OME-NGFF label image of the sample's image: the same
	// as Path "labels/<Label>". Set at most one of Path and Label.
	Label string `json:"label"`
	// Dtype is the output type: F32 (the default) or BF16 for images,
	// an integer type for labels (values pass through; a value that does
	// not fit the type fails the batch).
	Dtype Dtype `json:"dtype"`
	// HostBufferBytes and DeviceBufferBytes override Config's for this
	// source's reads and decodes (0: Config's). Every source has its own
	// staging and decode buffers and its own batch slots.
	HostBufferBytes   int64 `json:"host_buffer_bytes"`
	DeviceBufferBytes int64 `json:"device_buffer_bytes"`
}

// DefaultSourceName is the name of the one tensor of a pipeline whose
// Config has no Sources.
const DefaultSourceName = "image"

// resolve returns the source's array URI for a sample's URI.
func (s *Source) resolve(uri string) string {
	rel := s.Path
	if s.Label != "" {
		rel = "labels/" + s.Label
	}
	if rel == "" {
		return uri
	}
	if strings.HasPrefix(rel, "/") || strings.Contains(rel, "://") {
		return rel
	}
	return joinURI(uri, rel)
}

// joinURI joins a relative path to a URI or local path, keeping its scheme
// and host and any query string.
func joinURI(uri, rel string) string {
	query := ""
	if i := strings.IndexByte(uri, '?'); i >= 0 && strings.Contains(uri, "://") {
		uri, query = uri[:i], uri[i:]
	}
	prefix := ""
	if i := strings.Index(uri, "://"); i >= 0 {
		rest := uri[i+3:]
		host := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			host = rest[:j]
		}
		prefix, uri = uri[:i+3]+host, strings.TrimPrefix(rest, host)
		if uri == "" {
			uri = "/"
		}
	}
	return prefix + path.Join(uri, rel) + query
}

// sourcesOf validates Config.Sources and returns the sources a pipeline
// reads: Config.Sources, or one source named DefaultSourceName of
// Config.Dtype.
func sourcesOf(c *Config) ([]Source, error) {
	bad := func(i int, field string, v any, allowed string) ([]Source, error) {
		return nil, errorf("new", ErrInvalid, "", "Config.Sources[%d].%s = %v: must be %s", i, field, v, allowed)
	}
	if len(c.Sources) == 0 {
		return []Source{{Name: DefaultSourceName, Dtype: c.Dtype}}, nil
	}
	if c.Dtype != F32 && c.Sources[0].Dtype != c.Dtype {
		return nil, errorf("new", ErrInvalid, "", "Config.Dtype = %v and Config.Sources[0].Dtype = %v disagree: with Sources, set each source's Dtype", c.Dtype, c.Sources[0].Dtype)
	}
	out := slices.Clone(c.Sources)
	for i, s := range out {
		switch {
		case s.Name == "":
			return bad(i, "Name", `""`, "a non-empty name")
		case slices.ContainsFunc(out[:i], func(o Source) bool { return o.Name == s.Name }):
			return bad(i, "Name", fmt.Sprintf("%q", s.Name), "unique")
		case i == 0 && (s.Path != "" || s.Label != ""):
			return bad(i, "Path", fmt.Sprintf("%q (Label %q)", s.Path, s.Label), "empty: the first source is the sample's own array, which the box is in")
		case s.Path != "" && s.Label != "":
			return bad(i, "Label", fmt.Sprintf("%q", s.Label), `empty when Path is set`)
		case strings.ContainsAny(s.Label, "/?"):
			return bad(i, "Label", fmt.Sprintf("%q", s.Label), "a label name (no / or ?)")
		case !s.Dtype.valid():
			return bad(i, "Dtype", s.Dtype, "a known output type")
		case s.HostBufferBytes < 0:
			return bad(i, "HostBufferBytes", s.HostBufferBytes, "0 or positive")
		case s.DeviceBufferBytes < 0:
			return bad(i, "DeviceBufferBytes", s.DeviceBufferBytes, "0 or positive")
		}
	}
	return out, nil
}

// axisMap maps a primary array's box onto another source's array: for each
// axis of the source, the primary axis whose range it takes.
type axisMap []int

// matchAxes matches a source's axes to the primary's by name, or in order
// when either side has no names; uri names the source's array for errors.
func matchAxes(primary, source []string, prank, srank int, uri string) (axisMap, error) {
	named := func(a []string, rank int) bool {
		return len(a) == rank && !slices.Contains(a, "")
	}
	if !named(primary, prank) || !named(source, srank) {
		if prank != srank {
			return nil, errorf("plan", ErrRank, uri, "rank %d, the sample's array has %d, and without axis names on both the axes cannot be matched", srank, prank)
		}
		m := make(axisMap, srank)
		for i := range m {
			m[i] = i
		}
		return m, nil
	}
	m := make(axisMap, srank)
	for i, a := range source {
		j := slices.Index(primary, a)
		if j < 0 {
			return nil, errorf("plan", ErrRank, uri, "axis %q is not an axis of the sample's array (%s)", a, strings.Join(primary, ","))
		}
		m[i] = j
	}
	return m, nil
}

// project returns the box m takes from a primary box.
func (m axisMap) project(box []Range) []Range {
	out := make([]Range, len(m))
	for i, j := range m {
		out[i] = box[j]
	}
	return out
}

// shape returns the sample shape m takes from the primary's.
func (m axisMap) shape(primary []int) []int {
	out := make([]int, len(m))
	for i, j := range m {
		out[i] = primary[j]
	}
	return out
}
