package sampler

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

// foreground is where an array's foreground is: the voxels of one level
// of its label (or of itself) that are foreground, as runs of consecutive
// voxels in C order, and how a voxel there maps onto the array's voxels.
type foreground struct {
	uri   string  // the label, or the array itself
	level int     // the level searched
	shape []int64 // that level's shape
	count int64   // foreground voxels
	runs  []run
	// axis[d] is the label axis matched to the array's axis d, or -1;
	// voxel i of that label axis covers array voxels [lo[d][i], hi[d][i]).
	axis   []int
	lo, hi [][]int64
}

// run is a run of foreground voxels: the flat index of its first voxel
// and the foreground voxels before it.
type run struct {
	start, before int64
}

// scanElements bounds the elements read at once while searching a level.
const scanElements = 1 << 22

// findForeground searches every array's label (or the array) for
// foreground.
func (s *Sampler) findForeground(ctx context.Context, cfg Config) error {
	frac := cfg.Fraction
	if frac == 0 {
		frac = DefaultFraction
	}
	s.fraction = uint64(frac * (1 << 53))
	limit := cfg.MaxLabelVoxels
	switch limit {
	case 0:
		limit = DefaultMaxLabelVoxels
	case -1:
		limit = math.MaxInt64
	}
	for i, a := range s.arrays {
		field := fmt.Sprintf("Arrays[%d].Label", i)
		n, isLabel := a.src, cfg.Arrays[i].Label != ""
		if isLabel {
			var err error
			if n, err = openNode(ctx, cfg.Open, cfg.Arrays[i].Label); err != nil {
				return err
			}
		}
		arr, fr, level, err := pickLevel(n, cfg.LabelLevel, limit)
		if err != nil {
			return err
		}
		fg := &foreground{uri: n.uri, level: level, shape: arr.Shape()}
		if fg.axis, err = matchAxes(a, n, len(fg.shape), field); err != nil {
			return err
		}
		if err := fg.scan(ctx, arr, isLabel, cfg.Threshold); err != nil {
			return err
		}
		fg.footprints(a, fr)
		a.fg = fg
	}
	return nil
}

// pickLevel opens the level of n to search: want, or with AutoLevel the
// finest of at most limit voxels.
func pickLevel(n *node, want int, limit int64) (*zarr.Array, *frame, int, error) {
	if want != AutoLevel {
		arr, fr, err := n.level(want, "LabelLevel")
		if err != nil {
			return nil, nil, 0, err
		}
		if v, ok := volume(arr.Shape()); !ok || v > uint64(limit) {
			return nil, nil, 0, invalid(n.uri, "LabelLevel", "level %d has %d voxels (shape %v), above MaxLabelVoxels = %d: choose a coarser level, AutoLevel, or raise MaxLabelVoxels", want, v, arr.Shape(), limit)
		}
		return arr, fr, want, nil
	}
	var shape []int64
	for k := range n.levels() {
		arr, fr, err := n.level(k, "LabelLevel")
		if err != nil {
			return nil, nil, 0, err
		}
		if v, ok := volume(arr.Shape()); ok && v <= uint64(limit) {
			return arr, fr, k, nil
		}
		shape = arr.Shape()
	}
	return nil, nil, 0, invalid(n.uri, "MaxLabelVoxels", "%d: every level is larger (the coarsest, level %d, has shape %v)", limit, n.levels()-1, shape)
}

// matchAxes returns, for each axis of a, the axis of n (of rank lrank)
// matched to it, or -1: by name, or by position when the ranks are equal
// and either side is unnamed.
func matchAxes(a *array, n *node, lrank int, field string) ([]int, error) {
	rank := len(a.shape)
	lnames := n.names()
	if lrank == rank && (a.names == nil || lnames == nil) {
		axis := make([]int, rank)
		for d := range axis {
			axis[d] = d
		}
		return axis, nil
	}
	if a.names == nil || lnames == nil {
		return nil, &pipeline.Error{Op: "sampler", Kind: pipeline.ErrRank, URI: n.uri,
			Err: fmt.Errorf("Config.%s: the label has %d axes and %s %d: matching them needs axis names on both", field, lrank, a.uri, rank)}
	}
	axis := slices.Repeat([]int{-1}, rank)
	for k, name := range lnames {
		d := slices.Index(a.names, name)
		if d < 0 {
			return nil, &pipeline.Error{Op: "sampler", Kind: pipeline.ErrRank, URI: n.uri,
				Err: fmt.Errorf("Config.%s: label axis %q is not an axis of %s (axes %q)", field, name, a.uri, a.names)}
		}
		axis[d] = k
	}
	return axis, nil
}

// scan reads arr in slabs along its first axis and keeps its foreground
// voxels as runs: voxels != 0 (NaN excepted) of a label, voxels >
// threshold of an image.
func (fg *foreground) scan(ctx context.Context, arr *zarr.Array, isLabel bool, threshold float64) error {
	shape := fg.shape
	row := int64(1)
	for _, n := range shape[1:] {
		row *= n
	}
	rows := int64(1)
	if row > 0 {
		rows = max(1, scanElements/row)
	}
	if c := arr.ChunkShape()[0]; rows > c {
		rows -= rows % c // whole chunks along the first axis
	}
	dt := arr.DataType()
	size := dt.Size()
	box := make([]zarr.Range, len(shape))
	for k, n := range shape {
		box[k] = zarr.Range{Start: 0, Stop: n}
	}
	inRun := false
	for first := int64(0); first < shape[0]; first += rows {
		if err := ctx.Err(); err != nil {
			return &pipeline.Error{Op: "sampler", Kind: pipeline.ErrCanceled, URI: fg.uri, Err: err}
		}
		box[0] = zarr.Range{Start: first, Stop: min(first+rows, shape[0])}
		reg, err := arr.ReadRegion(box)
		if err != nil {
			return &pipeline.Error{Op: "sampler", Kind: pipeline.ErrDecode, URI: fg.uri, Err: err}
		}
		base := first * row
		for i := 0; i*size < len(reg.Data); i++ {
			v := value(dt, reg.Data[i*size:])
			on := v > threshold
			if isLabel {
				on = v != 0 && !math.IsNaN(v)
			}
			if on {
				if !inRun {
					fg.runs = append(fg.runs, run{start: base + int64(i), before: fg.count})
				}
				fg.count++
			}
			inRun = on
		}
	}
	return nil
}

// value returns the little-endian element of type dt at b's start.
func value(dt zarr.DataType, b []byte) float64 {
	switch dt {
	case zarr.Bool, zarr.Uint8:
		return float64(b[0])
	case zarr.Int8:
		return float64(int8(b[0]))
	case zarr.Int16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case zarr.Uint16:
		return float64(binary.LittleEndian.Uint16(b))
	case zarr.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case zarr.Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case zarr.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case zarr.Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case zarr.Float16:
		return half(binary.LittleEndian.Uint16(b))
	case zarr.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// half returns the IEEE binary16 value h.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}

// footprints fills lo and hi: through both levels' OME-NGFF scales and
// translations when both have them (voxel i of the label covers the
// physical interval of width scale around its centre, and holds the
// array's voxels whose centres fall inside), else through the ratio of
// the shapes (label voxel i of n covers array voxels [i*N/n, (i+1)*N/n)).
// Every voxel covers at least one array voxel.
func (fg *foreground) footprints(a *array, lf *frame) {
	fg.lo = make([][]int64, len(a.shape))
	fg.hi = make([][]int64, len(a.shape))
	for d, k := range fg.axis {
		if k < 0 {
			continue
		}
		big, n := a.shape[d], fg.shape[k]
		lo, hi := make([]int64, n), make([]int64, n)
		for i := range n {
			var l, h int64
			if lf != nil && a.frame != nil && lf.scale[k] > 0 && a.frame.scale[d] > 0 {
				l, h = physical(i, lf.scale[k], lf.trans[k], a.frame.scale[d], a.frame.trans[d])
			} else {
				l, h = ratio(i, big, n), ratio(i+1, big, n)
			}
			if h <= l {
				h = l + 1
			}
			l, h = max(l, 0), min(h, big)
			if h <= l { // outside the array: its nearest voxel
				l = min(max(l, 0), big-1)
				h = l + 1
			}
			lo[i], hi[i] = l, h
		}
		fg.lo[d], fg.hi[d] = lo, hi
	}
}

// physical returns the array voxels [lo, hi) whose centres fall within
// label voxel i (of scale ls and translation lt) along one axis, the
// array's voxels having scale as and translation at; when none does, the
// voxel nearest to its centre. Each product is rounded on its own
// (explicit conversions), so that no platform fuses it into an FMA.
func physical(i int64, ls, lt, as, at float64) (lo, hi int64) {
	x := float64(i)
	l := float64(float64(x-0.5)*ls) + lt - at
	h := float64(float64(x+0.5)*ls) + lt - at
	lo, hi = int64(math.Ceil(l/as)), int64(math.Ceil(h/as))
	if hi <= lo {
		c := float64(x*ls) + lt - at
		lo = int64(math.Floor(c/as + 0.5))
		hi = lo + 1
	}
	return lo, hi
}

// ratio returns floor(i*big/n) without overflow.
func ratio(i, big, n int64) int64 {
	hi, lo := bits.Mul64(uint64(i), uint64(big))
	q, _ := bits.Div64(hi, lo, uint64(n))
	return int64(q)
}

// centre fills box with a box of extent ext centred on a foreground voxel
// drawn uniformly: a voxel of the label, then one of the array's voxels
// it covers; axes the label lacks are drawn as Uniform draws them. The box
// is moved inside an array at least as large along each axis.
func (fg *foreground) centre(r *stream, shape, ext []int64, box []pipeline.Range) {
	f := r.below(fg.count)
	j := sort.Search(len(fg.runs), func(i int) bool { return fg.runs[i].before > f }) - 1
	flat := fg.runs[j].start + f - fg.runs[j].before
	coord := make([]int64, len(fg.shape))
	for k := len(fg.shape) - 1; k >= 0; k-- {
		coord[k] = flat % fg.shape[k]
		flat /= fg.shape[k]
	}
	for d, b := range ext {
		n := shape[d]
		var start int64
		if k := fg.axis[d]; k >= 0 {
			lo, hi := fg.lo[d][coord[k]], fg.hi[d][coord[k]]
			start = lo + r.below(hi-lo) - b/2
		} else if n > b {
			start = r.below(n - b + 1)
		}
		if n >= b {
			start = min(max(start, 0), n-b)
		} else {
			start = 0
		}
		box[d] = pipeline.Range{Start: start, Stop: start + b}
	}
}
