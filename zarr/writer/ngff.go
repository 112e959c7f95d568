package writer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/zarr"
)

// Axis is an OME-NGFF axis.
type Axis struct {
	Name string // unique among the axes: "t", "c", "z", "y", "x"
	Type string // "space", "time", "channel" or a custom type; empty writes none
	Unit string // a UDUNITS-2 unit such as "micrometer"; empty writes none
}

// Downsampling is how each level is made from the level above it, over
// 2x2(x2) blocks of the space axes (other axes are kept). At an odd edge a
// block has fewer elements.
type Downsampling uint8

const (
	// Mean is the mean of the block: for integers rounded to nearest with
	// ties toward +infinity, computed exactly; for floats computed in
	// float64 and rounded to the type (a NaN in the block gives NaN); for
	// bool true when at least half the block is true. The level's
	// translation moves by half a voxel of the level above, to the
	// block's centre.
	Mean Downsampling = iota
	// Nearest takes the block's first element (even coordinates); the
	// translation stays.
	Nearest
)

// String returns "mean" or "nearest", the name written as the multiscale's
// "type".
func (m Downsampling) String() string {
	switch m {
	case Mean:
		return "mean"
	case Nearest:
		return "nearest"
	}
	return "Downsampling(" + strconv.Itoa(int(m)) + ")"
}

// NGFFSpec describes an OME-NGFF 0.5 multiscale image group.
type NGFFSpec struct {
	// Name is the multiscale's name; empty writes none.
	Name string
	// Axes are the image's axes, 2 to 5 of them, 2 or 3 of type "space";
	// one per dimension of Array.Shape.
	Axes []Axis
	// Levels is the number of resolution levels, 1 (the default when zero)
	// to 32. Level k is the array at path "k" in the group, halved k times
	// along the space axes (rounding up).
	Levels int
	// Scale is level 0's voxel size per axis; nil means 1 on every axis.
	// Level k's is Scale times 2^k on space axes.
	Scale []float64
	// Translation is level 0's origin per axis; nil means 0.
	Translation []float64
	// Downsampling is how levels 1 and up are computed.
	Downsampling Downsampling
	// Array is level 0's spec; each level uses it with its own shape. Its
	// Format must be 3 (or zero) and its DimensionNames nil (they are set
	// to the axis names) or equal to them.
	Array Spec
}

// Multiscale is an OME-NGFF group being written.
type Multiscale struct {
	dir    string
	levels []*Array
	space  []bool // which axes are downsampled
	method Downsampling
}

// ngffGroup is zarr.json of an OME-NGFF 0.5 image group.
type ngffGroup struct {
	ZarrFormat int       `json:"zarr_format"`
	NodeType   string    `json:"node_type"`
	Attributes ngffAttrs `json:"attributes"`
}

type (
	ngffAttrs struct {
		OME ngffOME `json:"ome"`
	}
	ngffOME struct {
		Version     string           `json:"version"`
		Multiscales []ngffMultiscale `json:"multiscales"`
	}
	ngffMultiscale struct {
		Name     string        `json:"name,omitempty"`
		Axes     []ngffAxis    `json:"axes"`
		Datasets []ngffDataset `json:"datasets"`
		Type     string        `json:"type"`
	}
	ngffAxis struct {
		Name string `json:"name"`
		Type string `json:"type,omitempty"`
		Unit string `json:"unit,omitempty"`
	}
	ngffDataset struct {
		Path                      string          `json:"path"`
		CoordinateTransformations []ngffTransform `json:"coordinateTransformations"`
	}
	ngffTransform struct {
		Type        string    `json:"type"`
		Scale       []float64 `json:"scale,omitempty"`
		Translation []float64 `json:"translation,omitempty"`
	}
)

// CreateNGFF validates spec and writes the group's metadata and every
// level's array metadata into dir (level k in dir/k). The group zarr.json
// lists every level with its scale and translation. Write level 0 with
// Level(0), then call Downsample.
func CreateNGFF(dir string, spec NGFFSpec) (*Multiscale, error) {
	rank := len(spec.Array.Shape)
	if len(spec.Axes) < 2 || len(spec.Axes) > 5 {
		return nil, specErr("NGFFSpec.Axes", "has %d axes; want 2 to 5", len(spec.Axes))
	}
	if len(spec.Axes) != rank {
		return nil, specErr("NGFFSpec.Axes", "has %d axes; Array.Shape has %d dimensions", len(spec.Axes), rank)
	}
	names := make([]string, rank)
	space := make([]bool, rank)
	nspace := 0
	for i, ax := range spec.Axes {
		if ax.Name == "" || slices.Contains(names[:i], ax.Name) {
			return nil, specErr(fmt.Sprintf("NGFFSpec.Axes[%d].Name", i), "%q is empty or repeated", ax.Name)
		}
		names[i] = ax.Name
		if ax.Type == "space" {
			space[i] = true
			nspace++
		}
	}
	if nspace < 2 || nspace > 3 {
		return nil, specErr("NGFFSpec.Axes", "has %d axes of type \"space\"; want 2 or 3", nspace)
	}
	levels := spec.Levels
	if levels == 0 {
		levels = 1
	}
	if levels < 1 || levels > 32 {
		return nil, specErr("NGFFSpec.Levels", "%d is outside 1..32", levels)
	}
	scale := slices.Repeat([]float64{1}, rank)
	if spec.Scale != nil {
		if len(spec.Scale) != rank {
			return nil, specErr("NGFFSpec.Scale", "has %d values for %d axes", len(spec.Scale), rank)
		}
		for i, v := range spec.Scale {
			if !(v > 0) || math.IsInf(v, 0) {
				return nil, specErr("NGFFSpec.Scale", "value %d is %v; want a positive finite number", i, v)
			}
		}
		scale = spec.Scale
	}
	translation := make([]float64, rank)
	if spec.Translation != nil {
		if len(spec.Translation) != rank {
			return nil, specErr("NGFFSpec.Translation", "has %d values for %d axes", len(spec.Translation), rank)
		}
		for i, v := range spec.Translation {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, specErr("NGFFSpec.Translation", "value %d is %v; want a finite number", i, v)
			}
		}
		translation = spec.Translation
	}
	if spec.Downsampling != Mean && spec.Downsampling != Nearest {
		return nil, specErr("NGFFSpec.Downsampling", "unknown method %v", spec.Downsampling)
	}
	if spec.Array.Format != 0 && spec.Array.Format != 3 {
		return nil, specErr("NGFFSpec.Array.Format", "OME-NGFF 0.5 needs format 3, not %d", spec.Array.Format)
	}
	if spec.Array.DimensionNames != nil && !slices.Equal(spec.Array.DimensionNames, names) {
		return nil, specErr("NGFFSpec.Array.DimensionNames", "%q differ from the axis names %q", spec.Array.DimensionNames, names)
	}

	ms := ngffMultiscale{Name: spec.Name, Type: spec.Downsampling.String()}
	for _, ax := range spec.Axes {
		ms.Axes = append(ms.Axes, ngffAxis(ax))
	}
	m := &Multiscale{dir: dir, space: space, method: spec.Downsampling}
	layouts := make([]*layout, levels)
	as := spec.Array
	as.DimensionNames = names
	as.Shape = slices.Clone(spec.Array.Shape)
	for k := range levels {
		if k > 0 {
			for d := range as.Shape {
				if space[d] {
					as.Shape[d] = ceilDiv(as.Shape[d], 2)
				}
			}
		}
		l, err := as.resolve()
		if err != nil {
			var se *SpecError
			if errors.As(err, &se) {
				se.Field = "NGFFSpec.Array" + strings.TrimPrefix(se.Field, "Spec")
			}
			return nil, err
		}
		layouts[k] = l
		f := math.Ldexp(1, k) // 2^k
		ds := ngffDataset{Path: strconv.Itoa(k)}
		sc := make([]float64, rank)
		tr := make([]float64, rank)
		for d := range rank {
			sc[d], tr[d] = scale[d], translation[d]
			if space[d] {
				sc[d] = scale[d] * f
				if spec.Downsampling == Mean {
					tr[d] = translation[d] + (f-1)/2*scale[d]
				}
			}
		}
		ds.CoordinateTransformations = []ngffTransform{{Type: "scale", Scale: sc}, {Type: "translation", Translation: tr}}
		ms.Datasets = append(ms.Datasets, ds)
	}
	group, err := marshal(ngffGroup{
		ZarrFormat: 3,
		NodeType:   "group",
		Attributes: ngffAttrs{OME: ngffOME{Version: "0.5", Multiscales: []ngffMultiscale{ms}}},
	})
	if err != nil {
		return nil, err
	}
	if err := writeMetadata(dir, map[string][]byte{"zarr.json": group}); err != nil {
		return nil, err
	}
	for k, l := range layouts {
		files, err := l.metadata()
		if err != nil {
			return nil, err
		}
		ldir := filepath.Join(dir, strconv.Itoa(k))
		if err := writeMetadata(ldir, files); err != nil {
			return nil, err
		}
		m.levels = append(m.levels, newArray(ldir, l))
	}
	return m, nil
}

// Dir returns the group's directory.
func (m *Multiscale) Dir() string { return m.dir }

// Levels returns the number of levels.
func (m *Multiscale) Levels() int { return len(m.levels) }

// Level returns level k's array, or nil when k is not in [0, Levels()).
func (m *Multiscale) Level(k int) *Array {
	if k < 0 || k >= len(m.levels) {
		return nil
	}
	return m.levels[k]
}

// Downsample computes levels 1 and up, each from the level above it as read
// back with package zarr's reader, so level 0 must be written first. Each
// level is written with WriteFrom(ctx, workers, ...): every chunk is
// computed from the region of the level above that it halves.
func (m *Multiscale) Downsample(ctx context.Context, workers int) error {
	for k := 1; k < len(m.levels); k++ {
		above, err := zarr.Open(m.levels[k-1].dir)
		if err != nil {
			return fmt.Errorf("writer: downsampling level %d: %w", k, err)
		}
		r := &reducer{
			ti:       m.levels[k].l.ti,
			space:    m.space,
			method:   m.method,
			srcShape: m.levels[k-1].l.spec.Shape,
			src:      above,
		}
		if err := m.levels[k].WriteFrom(ctx, workers, r.fill); err != nil {
			return fmt.Errorf("writer: downsampling level %d: %w", k, err)
		}
	}
	return nil
}

// regionReader is what the reducer reads the level above through.
type regionReader interface {
	ReadRegion(box []zarr.Range) (*zarr.Region, error)
}

// reducer computes a level's elements from the level above.
type reducer struct {
	ti       typeInfo
	space    []bool
	method   Downsampling
	srcShape []int64
	src      regionReader
}

// fill writes the elements of box (of the lower level) into dst, from the
// matching region of the level above: up to 2^3 times box.
func (r *reducer) fill(dst []byte, box []zarr.Range) error {
	srcBox := make([]zarr.Range, len(box))
	for d, b := range box {
		srcBox[d] = b
		if r.space[d] {
			srcBox[d] = zarr.Range{Start: 2 * b.Start, Stop: min(2*b.Stop, r.srcShape[d])}
		}
	}
	reg, err := r.src.ReadRegion(srcBox)
	if err != nil {
		return err
	}
	if want := boxBytes(srcBox, r.ti.size); len(reg.Data) != want {
		return fmt.Errorf("writer: reading %v returned %d bytes; want %d", srcBox, len(reg.Data), want)
	}
	r.reduce(dst, box, reg.Data, srcBox)
	return nil
}

// reduce computes the elements of box into dst from src, the elements of
// srcBox.
func (r *reducer) reduce(dst []byte, box []zarr.Range, src []byte, srcBox []zarr.Range) {
	rank := len(box)
	size := r.ti.size
	// Strides in elements, and the offsets of a block's 2^s elements.
	srcStride := make([]int64, rank)
	dstStride := make([]int64, rank)
	srcStride[rank-1], dstStride[rank-1] = 1, 1
	for d := rank - 2; d >= 0; d-- {
		srcStride[d] = srcStride[d+1] * (srcBox[d+1].Stop - srcBox[d+1].Start)
		dstStride[d] = dstStride[d+1] * (box[d+1].Stop - box[d+1].Start)
	}
	var axes []int // the space axes
	for d := range rank {
		if r.space[d] {
			axes = append(axes, d)
		}
	}
	offsets := make([]int64, 1<<len(axes))
	for c := range offsets {
		for b, d := range axes {
			if c>>b&1 == 1 {
				offsets[c] += srcStride[d]
			}
		}
	}
	p := make([]int64, rank) // the element of the lower level
	for d := range rank {
		p[d] = box[d].Start
	}
	for {
		var so, do int64
		pairs := 0 // bit b set: axes[b] has both elements of its pair
		for d := range rank {
			q := p[d]
			if r.space[d] {
				q = 2 * p[d]
			}
			so += (q - srcBox[d].Start) * srcStride[d]
			do += (p[d] - box[d].Start) * dstStride[d]
		}
		for b, d := range axes {
			if 2*p[d]+1 < r.srcShape[d] {
				pairs |= 1 << b
			}
		}
		var v uint64
		if r.method == Nearest {
			v = load(src[so*int64(size):], size)
		} else {
			v = r.mean(src, so, offsets, pairs)
		}
		store(dst[do*int64(size):], size, v)
		d := rank - 1
		for ; d >= 0; d-- {
			if p[d]++; p[d] < box[d].Stop {
				break
			}
			p[d] = box[d].Start
		}
		if d < 0 {
			return
		}
	}
}

// mean averages the elements at so+offsets[c] for every c within pairs.
func (r *reducer) mean(src []byte, so int64, offsets []int64, pairs int) uint64 {
	ti := r.ti
	shift := uint(bits.OnesCount(uint(pairs)))
	n := uint64(1) << shift
	var qs, rs uint64 // sums of v/n and v%n, as two's complement for signed types
	var fs float64
	for c, off := range offsets {
		if c&^pairs != 0 {
			continue
		}
		v := load(src[(so+off)*int64(ti.size):], ti.size)
		switch ti.kind {
		case kindFloat:
			fs += ti.toFloat64(v) / float64(n)
		case kindInt:
			s := ti.signExtend(v)
			qs += uint64(s >> shift) // floor division
			rs += uint64(s) & (n - 1)
		default:
			qs += v >> shift
			rs += v & (n - 1)
		}
	}
	if ti.kind == kindFloat {
		return ti.fromFloat64(fs)
	}
	// floor((Σv + n/2) / n) = Σq + floor((Σr + n/2) / n), without overflow.
	return (qs + (rs+n/2)>>shift) & ti.mask()
}
