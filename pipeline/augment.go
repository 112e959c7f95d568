package pipeline

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/damacy-go/damacy/ptx"
)

// Augment draws a transform for every sample, which the engines apply while
// they assemble the batch (no extra pass over it). Geometric transforms
// act on the box's axes (the primary source's axis order) and are the same
// for every source of a sample, so an image and its label stay aligned;
// intensity transforms act on the float sources named in Intensity.
//
// A sample's transform is drawn from (Seed, Sample.Seed) alone, so the
// same sample with the same seed gets the same transform in any batch, on
// either engine, after a restart. Batch.Transforms reports each sample's.
type Augment struct {
	// Seed selects the draws of the whole run.
	Seed uint64 `json:"seed"`
	// Flip flips each listed axis with its probability.
	Flip []AxisChance `json:"flip"`
	// Rot90 rotates, with its probability, by k quarter turns (k drawn
	// from 1, 2, 3) in the plane of its two axes, as np.rot90(x, k, axes).
	// The two axes must have the same extent.
	Rot90 []PlaneChance `json:"rot90"`
	// Permute, with its probability, permutes its axes (which must have
	// the same extent) by a permutation drawn uniformly.
	Permute []AxesChance `json:"permute"`
	// Intensity, on the float sources it applies to: v*Scale + Offset,
	// each drawn uniformly from its range ([1, 1] and [0, 0] when zero),
	// after normalisation by (v - Mean) / Std when Std is set, then
	// clipped to [ClipLow, ClipHigh] when Clip is set.
	Scale  [2]float64 `json:"scale"`
	Offset [2]float64 `json:"offset"`
	Mean   float64    `json:"mean"`
	Std    float64    `json:"std"`
	// In JSON, Clip, ClipLow and ClipHigh are one field, "clip": [low,
	// high] (absent: no clipping).
	Clip              bool    `json:"-"`
	ClipLow, ClipHigh float64 `json:"-"`
	// IntensitySources names the sources intensity transforms apply to;
	// empty: the first source. Each must have a float output.
	IntensitySources []string `json:"intensity_sources"`
}

// AxisChance is an axis of the box and a probability.
type AxisChance struct {
	Axis int     `json:"axis"`
	P    float64 `json:"p"`
}

// PlaneChance is a plane of two axes of the box and a probability.
type PlaneChance struct {
	Axes [2]int  `json:"axes"`
	P    float64 `json:"p"`
}

// AxesChance is a set of axes of the box and a probability.
type AxesChance struct {
	Axes []int   `json:"axes"`
	P    float64 `json:"p"`
}

// Transform is what a sample got: the output of a source of rank r (its
// axes as the box's, see Source) is
//
//	y = np.flip(np.transpose(x, Perm), [j for j in range(r) if Flip[j]])
//
// and for the float sources Intensity names, each element then becomes
// min(max(float32(float32(v*Scale) + Offset), Low), High) in float32
// arithmetic (NaN stays NaN), before a bfloat16 output is rounded.
type Transform struct {
	Perm      []int  // output axis j takes input axis Perm[j]
	Flip      []bool // output axis j is reversed
	Intensity bool   // the intensity transform applies
	Scale     float32
	Offset    float32
	Low, High float32 // -Inf and +Inf when not clipped
}

// noIntensity makes t a transform without intensity (what a source it
// does not apply to reports).
func (t *Transform) noIntensity() {
	t.Intensity, t.Scale, t.Offset = false, 1, 0
	t.Low, t.High = float32(math.Inf(-1)), float32(math.Inf(1))
}

// validateShape checks a (nil: no augmentation) against a sample shape
// and the pipeline's sources.
func (a *Augment) validateShape(shape []int) error {
	if a == nil {
		return nil
	}
	bad := func(field string, v any, why string) error {
		return errorf("new", ErrInvalid, "", "Config.Augment.%s = %v: %s", field, v, why)
	}
	rank := len(shape)
	axisOK := func(x int) bool { return x >= 0 && x < rank }
	probOK := func(p float64) bool { return p >= 0 && p <= 1 }
	for i, f := range a.Flip {
		if !axisOK(f.Axis) || !probOK(f.P) {
			return bad(fmt.Sprintf("Flip[%d]", i), f, fmt.Sprintf("want an axis in 0..%d and a probability in [0, 1]", rank-1))
		}
	}
	for i, r := range a.Rot90 {
		if !axisOK(r.Axes[0]) || !axisOK(r.Axes[1]) || r.Axes[0] == r.Axes[1] || !probOK(r.P) {
			return bad(fmt.Sprintf("Rot90[%d]", i), r, fmt.Sprintf("want two different axes in 0..%d and a probability in [0, 1]", rank-1))
		}
		if shape[r.Axes[0]] != shape[r.Axes[1]] {
			return bad(fmt.Sprintf("Rot90[%d]", i), r, fmt.Sprintf("axes of extents %d and %d: a quarter turn needs equal extents", shape[r.Axes[0]], shape[r.Axes[1]]))
		}
	}
	for i, p := range a.Permute {
		seen := map[int]bool{}
		for _, x := range p.Axes {
			if !axisOK(x) || seen[x] || shape[x] != shape[p.Axes[0]] {
				return bad(fmt.Sprintf("Permute[%d]", i), p, fmt.Sprintf("want distinct axes in 0..%d of equal extents (sample shape %v)", rank-1, shape))
			}
			seen[x] = true
		}
		if !probOK(p.P) {
			return bad(fmt.Sprintf("Permute[%d]", i), p, "want a probability in [0, 1]")
		}
	}
	return nil
}

// checked validates what of a does not depend on the sample shape and
// returns a copy of it, for Config.withDefaults.
func (a *Augment) checked(srcs []Source) (*Augment, error) {
	bad := func(field string, v any, why string) (*Augment, error) {
		return nil, errorf("new", ErrInvalid, "", "Config.Augment.%s = %v: %s", field, v, why)
	}
	for _, r := range [][2]float64{a.Scale, a.Offset} {
		if !(r[0] <= r[1]) {
			return bad("Scale/Offset", r, "want a range [low, high] with low <= high")
		}
	}
	if !(a.Std >= 0) || math.IsNaN(a.Mean) || math.IsInf(a.Std, 0) || math.IsInf(a.Mean, 0) {
		return bad("Std", a.Std, "want 0 (no normalisation) or a positive standard deviation, and a finite Mean")
	}
	if a.Clip && !(a.ClipLow <= a.ClipHigh) {
		return bad("ClipLow", a.ClipLow, fmt.Sprintf("want ClipLow <= ClipHigh (%v)", a.ClipHigh))
	}
	if a.HasIntensity() && len(a.IntensitySources) == 0 && srcs[0].Dtype.IsInteger() {
		return bad("IntensitySources", "[]", fmt.Sprintf("the first source, %q, has an integer output (%v): name the float sources to transform", srcs[0].Name, srcs[0].Dtype))
	}
	for _, name := range a.IntensitySources {
		i := slices.IndexFunc(srcs, func(s Source) bool { return s.Name == name })
		switch {
		case i < 0:
			return bad("IntensitySources", name, "no such source")
		case srcs[i].Dtype.IsInteger():
			return bad("IntensitySources", name, fmt.Sprintf("source %q has an integer output (%v): intensity transforms are for float outputs", name, srcs[i].Dtype))
		}
	}
	c := *a
	c.Flip, c.Rot90, c.IntensitySources = slices.Clone(a.Flip), slices.Clone(a.Rot90), slices.Clone(a.IntensitySources)
	c.Permute = make([]AxesChance, len(a.Permute))
	for i, p := range a.Permute {
		c.Permute[i] = AxesChance{Axes: slices.Clone(p.Axes), P: p.P}
	}
	return &c, nil
}

// HasIntensity reports whether a has an intensity transform (Scale,
// Offset, Std or Clip set).
func (a *Augment) HasIntensity() bool {
	return a.Scale != [2]float64{} || a.Offset != [2]float64{} || a.Std != 0 || a.Clip
}

// draw returns the transform of a sample of the given shape with seed s.
// The geometric steps compose as ptx.Transform composes numpy's flip,
// rot90 and transpose; their axes are checked by validateShape.
func (a *Augment) draw(shape []int, s uint64) Transform {
	rng := rand.New(rand.NewPCG(a.Seed, s))
	rank := len(shape)
	k := ptx.Identity()
	for _, f := range a.Flip {
		if rng.Float64() < f.P {
			k, _ = k.Flip(f.Axis)
		}
	}
	for _, r := range a.Rot90 {
		if rng.Float64() < r.P {
			k, _ = k.Rot90(1+rng.IntN(3), r.Axes[0], r.Axes[1])
		}
	}
	for _, p := range a.Permute {
		if rng.Float64() >= p.P {
			continue
		}
		perm := identityPerm(rank)
		drawn := slices.Clone(p.Axes)
		rng.Shuffle(len(drawn), func(i, j int) { drawn[i], drawn[j] = drawn[j], drawn[i] })
		for i, x := range p.Axes {
			perm[x] = drawn[i]
		}
		k, _ = k.Permute(perm)
	}
	t := Transform{Perm: make([]int, rank), Flip: make([]bool, rank)}
	for j := range rank {
		t.Perm[j], t.Flip[j] = int(k.Perm[j]), k.Flips>>j&1 != 0
	}
	t.noIntensity()
	if a.HasIntensity() {
		t.Intensity = true
		scale := a.Scale[0] + rng.Float64()*(a.Scale[1]-a.Scale[0])
		if a.Scale == [2]float64{} {
			scale = 1
		}
		offset := a.Offset[0] + rng.Float64()*(a.Offset[1]-a.Offset[0])
		// (v - mean) / std * scale + offset as one multiply and one add.
		if a.Std != 0 {
			offset -= a.Mean / a.Std * scale
			scale /= a.Std
		}
		t.Scale, t.Offset = float32(scale), float32(offset)
		if a.Clip {
			t.Low, t.High = float32(a.ClipLow), float32(a.ClipHigh)
		}
	}
	return t
}

func identityPerm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// project returns the transform t as a source whose axes m maps to the
// box's sees it, or an error when t moves one of its axes onto an axis it
// lacks.
func (t *Transform) project(m axisMap, name string) (Transform, error) {
	out := Transform{Perm: make([]int, len(m)), Flip: make([]bool, len(m)), Intensity: t.Intensity,
		Scale: t.Scale, Offset: t.Offset, Low: t.Low, High: t.High}
	for i, j := range m {
		k := slices.Index(m, t.Perm[j])
		if k < 0 {
			return Transform{}, errorf("augment", ErrInvalid, "", "source %q lacks box axis %d, which the transform moves onto its axis %d", name, t.Perm[j], i)
		}
		out.Perm[i], out.Flip[i] = k, t.Flip[j]
	}
	return out, nil
}
