package ptx

import (
	"fmt"
	"math"
	"slices"
	"structs"
	"unsafe"
)

// A Transform is the augmentation of one sample that the assemble kernel
// applies as it writes the sample, at no extra pass, laid out exactly as
// kernels.h's struct damacy_transform. It has two parts.
//
// Geometry, a signed permutation of the axes: output element y is the
// element x of the sample as assembled without the transform for which,
// for every output axis j < rank,
//
//	x[Perm[j]] = y[j], or shape[j]-1-y[j] when bit j of Flips is set;
//
// in numpy terms, np.flip(np.transpose(x, Perm[:rank]), flipped axes).
// Every axis keeps its extent: shape[Perm[j]] == shape[j]. Entries at and
// beyond the rank are the identity (Perm[j] == j, bit j clear), so one
// Transform serves every rank whose axes it leaves in place.
//
// Intensity, when Intensity is set (float outputs only): every element v,
// after its conversion to float32 and before any bfloat16 rounding,
// becomes
//
//	r = float32(float32(v*Scale) + Offset)   // two roundings, never fused
//	r = Lo if r < Lo; Hi if r > Hi; else r    // a NaN stays NaN
//
// and every NaN result is the quiet NaN 0x7FC00000 (the GPU does not keep
// NaN payloads through arithmetic). Fill values are transformed too: the
// transform applies to the sample as a whole. MapValue computes it.
//
// The zero Transform is not valid. Start from Identity and compose with
// Flip, Rot90 and Permute, which match numpy's functions of those names
// applied in sequence, and set the intensity with WithIntensity or
// Normalize.
type Transform struct {
	_ structs.HostLayout
	// Perm[j] is the axis of the untransformed sample that output axis j
	// takes.
	Perm [MaxRank]uint8
	// Flips has bit j set when output axis j is reversed.
	Flips uint8
	// Intensity is set when Scale, Offset, Lo and Hi apply.
	Intensity bool
	_         uint16
	// The intensity map: v*Scale + Offset, clipped to [Lo, Hi].
	Scale, Offset, Lo, Hi float32
}

// canonicalNaN is the float32 bits of every NaN the intensity map yields.
const canonicalNaN = 0x7fc00000

// Identity returns the transform that changes nothing, for every rank.
func Identity() Transform {
	var t Transform
	for j := range t.Perm {
		t.Perm[j] = uint8(j)
	}
	return t
}

// isIdentity reports whether t changes nothing.
func (t *Transform) isIdentity() bool {
	return t.Perm == Identity().Perm && t.Flips == 0 && !t.Intensity
}

// Flip returns t followed by np.flip(·, axis).
func (t Transform) Flip(axis int) (Transform, error) {
	if axis < 0 || axis >= MaxRank {
		return t, &TransformError{-1, axis, fmt.Sprintf("flip axis outside 0..%d", MaxRank-1)}
	}
	t.Flips ^= 1 << axis
	return t, nil
}

// Permute returns t followed by np.transpose(·, perm): output axis i of
// the result is output axis perm[i] of t. perm must be a permutation of
// 0..len(perm)-1; the axes beyond it stay where they are.
func (t Transform) Permute(perm []int) (Transform, error) {
	if len(perm) > MaxRank {
		return t, &TransformError{-1, -1, fmt.Sprintf("permutation %v of more than %d axes", perm, MaxRank)}
	}
	var seen [MaxRank]bool
	for _, q := range perm {
		if q < 0 || q >= len(perm) || seen[q] {
			return t, &TransformError{-1, -1, fmt.Sprintf("%v is not a permutation", perm)}
		}
		seen[q] = true
	}
	u := t
	for i, q := range perm {
		u.Perm[i] = t.Perm[q]
		u.Flips = u.Flips&^(1<<i) | (t.Flips>>q&1)<<i
	}
	return u, nil
}

// Rot90 returns t followed by np.rot90(·, k, axes=(a, b)): k quarter
// turns from axis a towards axis b (any k, negative turning the other
// way), by numpy's own steps: for k = 1 a flip of b then a swap of a and
// b; for 2 flips of a and b; for 3 a swap then a flip of b.
func (t Transform) Rot90(k, a, b int) (Transform, error) {
	if a < 0 || a >= MaxRank || b < 0 || b >= MaxRank || a == b {
		return t, &TransformError{-1, -1, fmt.Sprintf("rot90 axes (%d, %d) are not two different axes of 0..%d", a, b, MaxRank-1)}
	}
	swap := make([]int, max(a, b)+1)
	for i := range swap {
		swap[i] = i
	}
	swap[a], swap[b] = b, a
	switch (k%4 + 4) % 4 {
	case 1:
		t, _ = t.Flip(b)
		return t.Permute(swap)
	case 2:
		t, _ = t.Flip(a)
		return t.Flip(b)
	case 3:
		t, _ = t.Permute(swap)
		return t.Flip(b)
	}
	return t, nil
}

// WithIntensity returns t with the intensity map v*scale+offset clipped to
// [lo, hi] (see Transform). scale and offset must be finite; lo and hi
// may be infinite (no clip on that side) but not NaN, and lo <= hi.
func (t Transform) WithIntensity(scale, offset, lo, hi float32) (Transform, error) {
	t.Intensity, t.Scale, t.Offset, t.Lo, t.Hi = true, scale, offset, lo, hi
	if err := t.checkIntensity(); err != nil {
		return Transform{}, err
	}
	return t, nil
}

// Normalize returns t with the intensity map of (v-mean)/std clipped to
// [lo, hi], in the affine form the kernel computes: Scale = 1/std and
// Offset = -mean/std, each computed in float64 and rounded once to
// float32. It is not (v-mean)/std computed in float32 bit for bit: both
// round, differently. std must be finite and non-zero.
func (t Transform) Normalize(mean, std float64, lo, hi float32) (Transform, error) {
	if std == 0 || math.IsInf(std, 0) || math.IsNaN(std) || math.IsInf(mean, 0) || math.IsNaN(mean) {
		return Transform{}, &TransformError{-1, -1, fmt.Sprintf("normalisation by mean %v and std %v", mean, std)}
	}
	return t.WithIntensity(float32(1/std), float32(-mean/std), lo, hi)
}

func (t *Transform) checkIntensity() error {
	finite := func(x float32) bool { return !math.IsInf(float64(x), 0) && x == x }
	if !finite(t.Scale) || !finite(t.Offset) || t.Lo != t.Lo || t.Hi != t.Hi || t.Lo > t.Hi {
		return &TransformError{-1, -1, fmt.Sprintf("intensity scale %v, offset %v, clip [%v, %v]", t.Scale, t.Offset, t.Lo, t.Hi)}
	}
	return nil
}

// MapValue returns v through t's intensity map, exactly as the kernel
// computes it; v itself when Intensity is not set.
func (t *Transform) MapValue(v float32) float32 {
	if !t.Intensity {
		return v
	}
	return math.Float32frombits(t.mapBits(math.Float32bits(v)))
}

// mapBits is the intensity map on float32 bits.
func (t *Transform) mapBits(b uint32) uint32 {
	return mapValue(math.Float32frombits(b), t.Scale, t.Offset, t.Lo, t.Hi)
}

// mapValue returns the float32 bits of v through the intensity map of
// scale, offset, lo and hi (see Transform).
func mapValue(v, scale, offset, lo, hi float32) uint32 {
	r := float32(v * scale)
	r = float32(r + offset)
	if r != r {
		return canonicalNaN
	}
	if r < lo {
		r = lo
	} else if r > hi {
		r = hi
	}
	return math.Float32bits(r)
}

// validate checks t for sample of a batch of layout l.
func (t *Transform) validate(sample int, l *Layout) error {
	rank := len(l.Shape)
	var seen [MaxRank]bool
	for j := range MaxRank {
		p := int(t.Perm[j])
		if j >= rank {
			if p != j || t.Flips>>j&1 != 0 {
				return &TransformError{sample, j, fmt.Sprintf("axis beyond rank %d is not the identity (perm %d, flip %d)", rank, p, t.Flips>>j&1)}
			}
			continue
		}
		if p >= rank || seen[p] {
			return &TransformError{sample, j, fmt.Sprintf("perm %v is not a permutation of the %d axes", t.Perm[:rank], rank)}
		}
		seen[p] = true
		if l.Shape[p] != l.Shape[j] {
			return &TransformError{sample, j, fmt.Sprintf("extent %d taken from axis %d of extent %d (shape %v)", l.Shape[j], p, l.Shape[p], l.Shape)}
		}
	}
	if t.Intensity {
		if l.Dtype.IsInteger() {
			return &TransformError{sample, -1, fmt.Sprintf("an intensity map on a %v output", l.Dtype)}
		}
		if err := t.checkIntensity(); err != nil {
			err.(*TransformError).Sample = sample
			return err
		}
	}
	return nil
}

// Apply writes the geometry of t applied to src into dst (the intensity
// map is MapValue's): both are C-ordered arrays of the given shape, with
// elements of itemSize bytes, and dst = np.flip(np.transpose(src,
// Perm[:rank]), flipped axes). It is a plain reference implementation, for
// tests of the assemble kernel and of code that transforms samples.
func (t *Transform) Apply(dst, src []byte, shape []int, itemSize int) error {
	l := Layout{Samples: 1, Shape: shape, Dtype: Float32}
	if err := l.Validate(); err != nil {
		return err
	}
	if err := t.validate(-1, &l); err != nil {
		return err
	}
	n := int(l.SampleElems()) * itemSize
	if itemSize < 1 || len(dst) != n || len(src) != n {
		return fmt.Errorf("ptx: transform apply: %d and %d bytes for %v elements of %d bytes: %w", len(dst), len(src), shape, itemSize, ErrInvalid)
	}
	rank := len(shape)
	strides := CStrides(shape)
	y := make([]int, rank)
	for o := 0; o < n; o += itemSize {
		i := 0
		for j := range rank {
			x := y[j]
			if t.Flips>>j&1 != 0 {
				x = shape[j] - 1 - y[j]
			}
			i += x * strides[t.Perm[j]]
		}
		copy(dst[o:o+itemSize], src[i*itemSize:(i+1)*itemSize])
		for j := rank - 1; j >= 0; j-- {
			if y[j]++; y[j] < shape[j] {
				break
			}
			y[j] = 0
		}
	}
	return nil
}

// SetTransform sets the transform of sample (until then, and after Reset,
// every sample's is the identity). It is checked against the plan's
// layout: a *TransformError names the sample and the axis at fault, and
// the plan is unchanged.
func (p *Plan) SetTransform(sample int, t Transform) error {
	if sample < 0 || sample >= p.layout.Samples {
		return &TransformError{sample, -1, fmt.Sprintf("no sample %d in a batch of %d", sample, p.layout.Samples)}
	}
	if err := t.validate(sample, &p.layout); err != nil {
		return err
	}
	if len(p.transforms) == 0 {
		if t.isIdentity() {
			return nil
		}
		p.transforms = slices.Grow(p.transforms[:0], p.layout.Samples)[:p.layout.Samples]
		for i := range p.transforms {
			p.transforms[i] = Identity()
		}
	}
	p.transforms[sample] = t
	return nil
}

// Transforms returns the transform table, one transform per sample, or
// nil while every sample's is the identity, when the launch needs no
// table (the plan's own slice, valid until the next change; do not
// modify it; see TransformBytes).
func (p *Plan) Transforms() []Transform {
	if len(p.transforms) == 0 {
		return nil
	}
	return p.transforms
}

// TransformBytes returns the bytes of a transform table (Plan.Transforms)
// as the kernel reads it (a view, not a copy).
func TransformBytes(ts []Transform) []byte {
	if len(ts) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&ts[0])), len(ts)*int(unsafe.Sizeof(Transform{})))
}

// A TransformError reports a transform that cannot be applied: which
// sample's, which output axis (or -1) and why. It wraps ErrInvalid.
type TransformError struct {
	Sample int // the sample whose transform is at fault, or -1
	Axis   int // the output axis at fault, or -1
	Msg    string
}

func (e *TransformError) Error() string {
	s := "ptx: transform"
	if e.Sample >= 0 {
		s += fmt.Sprintf(" of sample %d", e.Sample)
	}
	if e.Axis >= 0 {
		s += fmt.Sprintf(": axis %d", e.Axis)
	}
	return s + ": " + e.Msg
}

// Unwrap returns ErrInvalid.
func (e *TransformError) Unwrap() error { return ErrInvalid }
