package sampler

import (
	"fmt"
	"math"
	"sort"

	"github.com/damacy-go/damacy/pipeline"
)

// validateOverlap checks Grid's overlap against Box.
func (cfg *Config) validateOverlap() error {
	if cfg.Overlap != nil && cfg.OverlapFraction != nil {
		return invalid("", "Overlap", "set Overlap (voxels) or OverlapFraction, not both")
	}
	if n := len(cfg.Overlap); n > 1 && n != len(cfg.Box) {
		return invalid("", "Overlap", "%d values for %d axes (want 1 or %d)", n, len(cfg.Box), len(cfg.Box))
	}
	if n := len(cfg.OverlapFraction); n > 1 && n != len(cfg.Box) {
		return invalid("", "OverlapFraction", "%d values for %d axes (want 1 or %d)", n, len(cfg.Box), len(cfg.Box))
	}
	for k, b := range cfg.Box {
		if len(cfg.Overlap) > 0 {
			if ov := perAxis(cfg.Overlap, k); ov < 0 || ov >= b {
				return invalid("", fmt.Sprintf("Overlap[%d]", k), "%d: want 0 <= overlap < Box[%d] = %d", ov, k, b)
			}
		}
		if len(cfg.OverlapFraction) > 0 {
			if f := perAxis(cfg.OverlapFraction, k); !(f >= 0 && f < 1) {
				return invalid("", fmt.Sprintf("OverlapFraction[%d]", k), "%v: want a fraction in [0, 1)", f)
			}
		}
	}
	return nil
}

// perAxis returns axis k's value of a per-axis list that may hold one
// value for every axis.
func perAxis[T any](v []T, k int) T {
	if len(v) == 1 {
		return v[0]
	}
	return v[k]
}

// steps returns the grid's window step along each axis.
func steps(cfg Config) []int64 {
	st := make([]int64, len(cfg.Box))
	for k, b := range cfg.Box {
		st[k] = b
		switch {
		case len(cfg.Overlap) > 0:
			st[k] = b - perAxis(cfg.Overlap, k)
		case len(cfg.OverlapFraction) > 0:
			f := perAxis(cfg.OverlapFraction, k)
			st[k] = max(1, int64(math.Floor(float64(float64(b)*(1-f)))))
		}
	}
	return st
}

// layGrid counts every array's windows: along an axis of extent n, a box
// of extent b steps by s from 0, and the last window is moved back to end
// at n (MONAI's dense_patch_slices): ceil((n-b)/s)+1 windows, or one at 0
// when n <= b.
func (s *Sampler) layGrid(cfg Config) error {
	st := steps(cfg)
	s.gridCum = make([]int64, len(s.arrays))
	var total int64
	for i, a := range s.arrays {
		a.step = st
		a.windows = make([]int64, len(s.box))
		count := int64(1)
		for k, b := range s.box {
			n := int64(1)
			if a.shape[k] > b {
				n = (a.shape[k]-b+st[k]-1)/st[k] + 1
			}
			a.windows[k] = n
			if count > math.MaxInt64/n {
				return invalid(a.uri, fmt.Sprintf("Arrays[%d]", i), "the grid has more than 2^63 windows")
			}
			count *= n
		}
		if total > math.MaxInt64-count {
			return invalid(a.uri, fmt.Sprintf("Arrays[%d]", i), "the grid has more than 2^63 windows")
		}
		total += count
		s.gridCum[i] = total
	}
	s.total = total
	return nil
}

// window returns window g of the grid: arrays in order, each array's
// windows in C order of their per-axis indices.
func (s *Sampler) window(g int64) Draw {
	ai := sort.Search(len(s.gridCum), func(i int) bool { return s.gridCum[i] > g })
	a := s.arrays[ai]
	rem := g
	if ai > 0 {
		rem -= s.gridCum[ai-1]
	}
	d := Draw{Sample: pipeline.Sample{URI: a.uri, Level: a.level, Box: make([]pipeline.Range, len(s.box))}, Index: g, Array: ai, Window: make([]int64, len(s.box))}
	for k := len(s.box) - 1; k >= 0; k-- {
		w := rem % a.windows[k]
		rem /= a.windows[k]
		start := w * a.step[k]
		if last := a.shape[k] - s.box[k]; start > last {
			start = max(last, 0)
		}
		d.Window[k] = w
		d.Box[k] = pipeline.Range{Start: start, Stop: start + s.box[k]}
	}
	return d
}
