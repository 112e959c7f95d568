package ptx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os/exec"
	"slices"
	"testing"
)

// An nd is a C-ordered array, for the reference transforms below, which
// follow numpy's definitions directly, not Transform's composition rules.
type nd[T any] struct {
	shape []int
	data  []T
}

// remap returns the array of the given shape whose element y is a's
// element pick(y).
func remap[T any](a nd[T], shape []int, pick func(y []int) []int) nd[T] {
	out := nd[T]{shape: slices.Clone(shape)}
	strides := CStrides(a.shape)
	for y := range boxPoints(shape) {
		x := pick(y)
		i := 0
		for d := range x {
			i += x[d] * strides[d]
		}
		out.data = append(out.data, a.data[i])
	}
	return out
}

// refFlip is np.flip(a, axis).
func refFlip[T any](a nd[T], axis int) nd[T] {
	return remap(a, a.shape, func(y []int) []int {
		x := slices.Clone(y)
		x[axis] = a.shape[axis] - 1 - y[axis]
		return x
	})
}

// refTranspose is np.transpose(a, perm): axis i of the result is axis
// perm[i] of a.
func refTranspose[T any](a nd[T], perm []int) nd[T] {
	shape := make([]int, len(perm))
	for i, p := range perm {
		shape[i] = a.shape[p]
	}
	return remap(a, shape, func(y []int) []int {
		x := make([]int, len(y))
		for i, p := range perm {
			x[p] = y[i]
		}
		return x
	})
}

// refRot90 is np.rot90(a, k, axes=(p, q)), from the rotation itself: one
// quarter turn takes y to x with x[p] = y[q] and x[q] = n[q]-1-y[p]
// (np.rot90([[1, 2], [3, 4]]) is [[2, 4], [1, 3]]).
func refRot90[T any](a nd[T], k, p, q int) nd[T] {
	for range (k%4 + 4) % 4 {
		shape := slices.Clone(a.shape)
		shape[p], shape[q] = a.shape[q], a.shape[p]
		b := a
		a = remap(b, shape, func(y []int) []int {
			x := slices.Clone(y)
			x[p], x[q] = y[q], b.shape[q]-1-y[p]
			return x
		})
	}
	return a
}

// A refOp is one numpy call of a sequence.
type refOp struct {
	Kind string `json:"kind"` // "flip", "transpose" or "rot90"
	Axis int    `json:"axis,omitempty"`
	Perm []int  `json:"perm,omitempty"`
	K    int    `json:"k,omitempty"`
	A    int    `json:"a,omitempty"`
	B    int    `json:"b,omitempty"`
}

func (o refOp) String() string {
	switch o.Kind {
	case "flip":
		return fmt.Sprintf("flip(%d)", o.Axis)
	case "transpose":
		return fmt.Sprintf("transpose(%v)", o.Perm)
	}
	return fmt.Sprintf("rot90(%d, (%d, %d))", o.K, o.A, o.B)
}

// compose returns t followed by o, through Transform's methods.
func (o refOp) compose(t Transform) (Transform, error) {
	switch o.Kind {
	case "flip":
		return t.Flip(o.Axis)
	case "transpose":
		return t.Permute(o.Perm)
	}
	return t.Rot90(o.K, o.A, o.B)
}

// refApply applies ops to a with the reference functions.
func refApply[T any](a nd[T], ops []refOp) nd[T] {
	for _, o := range ops {
		switch o.Kind {
		case "flip":
			a = refFlip(a, o.Axis)
		case "transpose":
			a = refTranspose(a, o.Perm)
		default:
			a = refRot90(a, o.K, o.A, o.B)
		}
	}
	return a
}

// composeAll returns Identity followed by ops.
func composeAll(t testing.TB, ops []refOp) Transform {
	t.Helper()
	tf := Identity()
	for _, o := range ops {
		var err error
		if tf, err = o.compose(tf); err != nil {
			t.Fatalf("%v: %v", o, err)
		}
	}
	return tf
}

// randomOps returns up to n random numpy calls on an array of the given
// rank, shapes free to change along the way.
func randomOps(rng *rand.Rand, rank, n int) []refOp {
	var ops []refOp
	for range rng.IntN(n + 1) {
		switch rng.IntN(3) {
		case 0:
			ops = append(ops, refOp{Kind: "flip", Axis: rng.IntN(rank)})
		case 1:
			ops = append(ops, refOp{Kind: "transpose", Perm: rng.Perm(rank)})
		default:
			if rank < 2 {
				continue
			}
			ab := rng.Perm(rank)
			ops = append(ops, refOp{Kind: "rot90", K: rng.IntN(11) - 5, A: ab[0], B: ab[1]})
		}
	}
	return ops
}

// shapePreservingOps returns up to n random numpy calls that keep shape
// as it is: flips, permutations and rotations among axes of equal extent.
func shapePreservingOps(rng *rand.Rand, shape []int, n int) []refOp {
	rank := len(shape)
	var ops []refOp
	for range rng.IntN(n + 1) {
		switch rng.IntN(3) {
		case 0:
			ops = append(ops, refOp{Kind: "flip", Axis: rng.IntN(rank)})
		case 1:
			// Shuffle the axes within each group of equal extents.
			perm := make([]int, rank)
			for d := range perm {
				perm[d] = d
			}
			for d := range rank {
				var same []int
				for e := range rank {
					if shape[e] == shape[d] {
						same = append(same, e)
					}
				}
				if same[0] == d {
					shuffled := slices.Clone(same)
					rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
					for i, e := range same {
						perm[e] = shuffled[i]
					}
				}
			}
			ops = append(ops, refOp{Kind: "transpose", Perm: perm})
		default:
			var pairs [][2]int
			for a := range rank {
				for b := range rank {
					if a != b && shape[a] == shape[b] {
						pairs = append(pairs, [2]int{a, b})
					}
				}
			}
			if len(pairs) > 0 {
				p := pairs[rng.IntN(len(pairs))]
				ops = append(ops, refOp{Kind: "rot90", K: rng.IntN(11) - 5, A: p[0], B: p[1]})
			}
		}
	}
	return ops
}

// equalishShape returns a shape of the given rank whose extents take at
// most two values, so that axes can trade places.
func equalishShape(rng *rand.Rand, rank int) []int {
	limit := []int{0, 3000, 50, 14, 7, 5, 4, 3, 3}[rank]
	e := [2]int{1 + rng.IntN(limit), 1 + rng.IntN(limit)}
	s := make([]int, rank)
	for d := range s {
		s[d] = e[rng.IntN(2)]
	}
	return s
}

func upTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// int32Bytes returns v as host-order bytes.
func int32Bytes(v []int) []byte {
	b := make([]uint32, len(v))
	for i, x := range v {
		b[i] = uint32(x)
	}
	return bytes.Clone(u32Bytes(b))
}

// checkApply compares t.Apply on upTo(shape) with want (or, with want's
// shape different from shape, expects t to be refused).
func checkApply(t *testing.T, tf Transform, shape []int, want nd[int], what string) {
	t.Helper()
	n := len(want.data)
	got := make([]byte, 4*n)
	err := tf.Apply(got, int32Bytes(upTo(n)), shape, 4)
	if !slices.Equal(want.shape, shape) {
		var te *TransformError
		if !errors.As(err, &te) || te.Axis < 0 {
			t.Errorf("%s: shape %v becomes %v; Apply error %v, want a *TransformError naming an axis", what, shape, want.shape, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got, int32Bytes(want.data)) {
		t.Errorf("%s on %v: Apply differs from numpy's definition (transform %+v)", what, shape, tf)
	}
}

// TestTransformReference composes random sequences of np.flip,
// np.transpose and np.rot90 (negative k and unequal extents along the way
// included) into Transforms and compares Apply with the reference
// functions, which follow numpy's definitions directly.
func TestTransformReference(t *testing.T) {
	// The reference functions themselves, against numpy's documented
	// results on [[1, 2], [3, 4]].
	m := nd[int]{[]int{2, 2}, []int{1, 2, 3, 4}}
	for _, tt := range []struct {
		op   refOp
		want []int
	}{
		{refOp{Kind: "rot90", K: 1, A: 0, B: 1}, []int{2, 4, 1, 3}},
		{refOp{Kind: "rot90", K: -1, A: 0, B: 1}, []int{3, 1, 4, 2}},
		{refOp{Kind: "rot90", K: 2, A: 0, B: 1}, []int{4, 3, 2, 1}},
		{refOp{Kind: "rot90", K: 1, A: 1, B: 0}, []int{3, 1, 4, 2}},
		{refOp{Kind: "flip", Axis: 0}, []int{3, 4, 1, 2}},
		{refOp{Kind: "flip", Axis: 1}, []int{2, 1, 4, 3}},
		{refOp{Kind: "transpose", Perm: []int{1, 0}}, []int{1, 3, 2, 4}},
	} {
		if got := refApply(m, []refOp{tt.op}); !slices.Equal(got.data, tt.want) {
			t.Errorf("reference %v of [[1 2] [3 4]] = %v; want %v", tt.op, got.data, tt.want)
		}
	}
	rng := newRand(t)
	for rank := 1; rank <= 5; rank++ {
		for range 300 {
			shape := make([]int, rank)
			for d := range shape {
				shape[d] = 1 + rng.IntN(3)
			}
			ops := randomOps(rng, rank, 5)
			tf := composeAll(t, ops)
			n := int(Layout{Samples: 1, Shape: shape}.SampleElems())
			want := refApply(nd[int]{shape, upTo(n)}, ops)
			checkApply(t, tf, shape, want, fmt.Sprint(ops))
		}
	}
}

// TestTransformNumpy runs random sequences through numpy itself and
// compares numpy's arrays with the reference functions and with Apply.
func TestTransformNumpy(t *testing.T) {
	python := mustHavePython(t)
	rng := newRand(t)
	type numpyCase struct {
		Shape []int   `json:"shape"`
		Ops   []refOp `json:"ops"`
	}
	var cases []numpyCase
	for rank := 1; rank <= 5; rank++ {
		for range 60 {
			shape := make([]int, rank)
			for d := range shape {
				shape[d] = 1 + rng.IntN(3)
			}
			cases = append(cases, numpyCase{shape, randomOps(rng, rank, 5)})
		}
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	const script = `
import json, sys
import numpy as np
out = []
for c in json.load(sys.stdin):
    a = np.arange(int(np.prod(c["shape"]))).reshape(c["shape"])
    for o in c["ops"] or []:
        if o["kind"] == "flip":
            a = np.flip(a, o.get("axis", 0))
        elif o["kind"] == "transpose":
            a = np.transpose(a, o["perm"])
        else:
            a = np.rot90(a, o.get("k", 0), axes=(o.get("a", 0), o.get("b", 0)))
    out.append({"shape": list(a.shape), "data": a.ravel().tolist()})
json.dump(out, sys.stdout)
`
	cmd := exec.Command(python, "-c", script)
	cmd.Stdin = bytes.NewReader(in)
	raw, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("numpy: %v\n%s", err, ee.Stderr)
	} else if err != nil {
		t.Fatalf("numpy: %v", err)
	}
	var results []struct {
		Shape []int `json:"shape"`
		Data  []int `json:"data"`
	}
	if err := json.Unmarshal(raw, &results); err != nil || len(results) != len(cases) {
		t.Fatalf("numpy's answer: %v (%d results for %d cases)", err, len(results), len(cases))
	}
	for i, c := range cases {
		np := nd[int]{results[i].Shape, results[i].Data}
		n := int(Layout{Samples: 1, Shape: c.Shape}.SampleElems())
		if ref := refApply(nd[int]{c.Shape, upTo(n)}, c.Ops); !slices.Equal(ref.shape, np.shape) || !slices.Equal(ref.data, np.data) {
			t.Errorf("%v on %v: reference %v %v, numpy %v %v", c.Ops, c.Shape, ref.shape, ref.data, np.shape, np.data)
		}
		checkApply(t, composeAll(t, c.Ops), c.Shape, np, fmt.Sprint(c.Ops))
	}
	t.Logf("%d sequences agree with numpy", len(cases))
}

// refMapBits is the intensity map computed another way: the product
// exactly in float64 (24-bit mantissas), rounded once to float32; the sum
// exactly with math/big, rounded once to float32; then the clip and the
// NaN rule.
func refMapBits(tf *Transform, b uint32) uint32 {
	v := math.Float32frombits(b)
	p := float32(float64(v) * float64(tf.Scale))
	var r float32
	if math.IsInf(float64(p), 0) || math.IsNaN(float64(p)) || math.IsInf(float64(tf.Offset), 0) {
		r = p + tf.Offset
	} else {
		x := new(big.Float).SetPrec(400).SetFloat64(float64(p))
		x.Add(x, new(big.Float).SetFloat64(float64(tf.Offset)))
		r, _ = x.Float32()
		if r == 0 && p == 0 && tf.Offset == 0 {
			r = p + tf.Offset // the sign of an exact zero, IEEE's
		}
	}
	switch {
	case r != r:
		return canonicalNaN
	case r < tf.Lo:
		r = tf.Lo
	case r > tf.Hi:
		r = tf.Hi
	}
	return math.Float32bits(r)
}

// TestTransformMapValue checks the intensity map against refMapBits on
// random values (specials, subnormals, NaN payloads, overflow) and on
// cases worked by hand.
func TestTransformMapValue(t *testing.T) {
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	nan := math.Float32frombits(0x7fa00001) // a signalling NaN with a payload
	tests := []struct {
		scale, offset, lo, hi, v, want float32
	}{
		{2, 1, -inf, inf, 3, 7},
		{0.5, -1, 0, 1, 10, 1},
		{0.5, -1, 0, 1, -10, 0},
		{1, 0, -1, 1, negZero, 0},             // -0 + 0 is +0
		{1, negZero, -1, 1, negZero, negZero}, // -0 + -0 is -0
		{1, negZero, 0, 1, negZero, negZero},  // -0 is not below 0
		{1, 0, -inf, inf, inf, inf},
		{-1, 0, -inf, inf, inf, -inf},
		{math.MaxFloat32, 0, -inf, inf, 2, inf},
		{math.MaxFloat32, 0, -5, 5, 2, 5},
		{1, 0, -inf, inf, 1e-45, 1e-45}, // subnormals kept
		{0.5, 0, -inf, inf, 1e-45, 0},   // ties to even
	}
	for _, tt := range tests {
		tf, err := Identity().WithIntensity(tt.scale, tt.offset, tt.lo, tt.hi)
		if err != nil {
			t.Fatal(err)
		}
		if got := tf.MapValue(tt.v); math.Float32bits(got) != math.Float32bits(tt.want) {
			t.Errorf("clip(%v*%v+%v, %v, %v) = %v; want %v", tt.v, tt.scale, tt.offset, tt.lo, tt.hi, got, tt.want)
		}
	}
	for _, tt := range []struct {
		scale float32
		v     float32
	}{{1, nan}, {0, inf}, {2, float32(math.NaN())}} {
		tf, _ := Identity().WithIntensity(tt.scale, 0, -1, 1)
		if got := math.Float32bits(tf.MapValue(tt.v)); got != canonicalNaN {
			t.Errorf("%v*%v, clipped: bits %#x; want the NaN %#x", tt.v, tt.scale, got, canonicalNaN)
		}
	}
	if id := Identity(); math.Float32bits(id.MapValue(nan)) != math.Float32bits(nan) {
		t.Error("MapValue without an intensity map changed a NaN")
	}

	rng := newRand(t)
	randomFloat := func() float32 {
		switch rng.IntN(6) {
		case 0:
			return math.Float32frombits(rng.Uint32())
		case 1:
			return math.Float32frombits(rng.Uint32() & 0x807fffff) // zero or subnormal
		default:
			return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
		}
	}
	finite := func() float32 {
		for {
			if x := randomFloat(); !math.IsInf(float64(x), 0) && x == x {
				return x
			}
		}
	}
	for range 200000 {
		lo, hi := randomFloat(), randomFloat()
		if lo != lo || hi != hi {
			continue
		}
		switch rng.IntN(3) {
		case 0:
			lo, hi = -inf, inf
		case 1:
			lo = -inf
		}
		lo, hi = min(lo, hi), max(lo, hi)
		tf, err := Identity().WithIntensity(finite(), finite(), lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		b := math.Float32bits(randomFloat())
		if got, want := tf.mapBits(b), refMapBits(&tf, b); got != want {
			t.Fatalf("clip(%#x*%v+%v, %v, %v) = %#x; reference %#x", b, tf.Scale, tf.Offset, tf.Lo, tf.Hi, got, want)
		}
	}
}

// TestTransformErrors checks that bad compositions, intensity maps and
// transforms that do not fit a layout are refused with a *TransformError
// naming the sample and axis, leaving the plan unchanged.
func TestTransformErrors(t *testing.T) {
	id := Identity()
	for _, err := range []error{
		second(id.Flip(-1)), second(id.Flip(MaxRank)),
		second(id.Permute([]int{0, 0})), second(id.Permute([]int{1, 2})), second(id.Permute(upTo(MaxRank + 1))),
		second(id.Rot90(1, 0, 0)), second(id.Rot90(1, 0, MaxRank)),
		second(id.WithIntensity(1, 0, 1, 0)), second(id.WithIntensity(float32(math.Inf(1)), 0, 0, 1)),
		second(id.WithIntensity(1, float32(math.NaN()), 0, 1)), second(id.WithIntensity(1, 0, float32(math.NaN()), 1)),
		second(id.Normalize(0, 0, 0, 1)), second(id.Normalize(math.NaN(), 1, 0, 1)),
	} {
		var te *TransformError
		if !errors.As(err, &te) || !errors.Is(err, ErrInvalid) {
			t.Errorf("error %v; want a *TransformError", err)
		}
	}
	if tf, err := id.Normalize(10, 4, -3, 3); err != nil || tf.Scale != 0.25 || tf.Offset != -2.5 {
		t.Errorf("Normalize(10, 4) = %+v, %v; want scale 0.25, offset -2.5", tf, err)
	}

	l := Layout{Samples: 3, Shape: []int{4, 4, 5}, Dtype: Float32}
	tests := []struct {
		name   string
		out    Dtype
		sample int
		tf     Transform
		axis   int
	}{
		{"sample", Float32, 3, id, -1},
		{"negative sample", Float32, -1, id, -1},
		{"unequal extents", Float32, 1, must(id.Permute([]int{0, 2, 1})), 1},
		{"rot90 of unequal extents", Float32, 2, must(id.Rot90(1, 1, 2)), 1},
		{"flip beyond rank", Float32, 0, must(id.Flip(3)), 3},
		{"permutation beyond rank", Float32, 0, must(id.Permute([]int{0, 1, 2, 4, 3})), 3},
		{"zero transform", Float32, 0, Transform{}, 1},
		{"intensity on integers", Int32, 2, must(id.WithIntensity(2, 0, 0, 1)), -1},
		{"bad intensity", Float32, 2, Transform{Perm: id.Perm, Intensity: true, Lo: 1}, -1},
	}
	for _, tt := range tests {
		l.Dtype = tt.out
		p, err := NewPlan(l)
		if err != nil {
			t.Fatal(err)
		}
		err = p.SetTransform(tt.sample, tt.tf)
		var te *TransformError
		if !errors.As(err, &te) || te.Sample != tt.sample || te.Axis != tt.axis || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v; want a *TransformError on sample %d, axis %d", tt.name, err, tt.sample, tt.axis)
		}
		if p.Transforms() != nil {
			t.Errorf("%s: plan has transforms after a refused one", tt.name)
		}
	}

	// Identity costs no table; a transform makes one, Reset drops it.
	l.Dtype = BFloat16
	p, _ := NewPlan(l)
	if err := p.SetTransform(1, id); err != nil || p.Transforms() != nil {
		t.Errorf("identity: %v, table %v", err, p.Transforms())
	}
	flip := must(id.Flip(2))
	if err := p.SetTransform(1, flip); err != nil {
		t.Fatal(err)
	}
	if got := p.Transforms(); len(got) != 3 || got[0] != id || got[1] != flip || got[2] != id {
		t.Errorf("table %+v; want identity, flip, identity", got)
	}
	if n := len(TransformBytes(p.Transforms())); n != 3*28 {
		t.Errorf("TransformBytes: %d bytes; want %d", n, 3*28)
	}
	p.Reset()
	if p.Transforms() != nil {
		t.Error("Reset kept the transforms")
	}
}

func second[T any](_ T, err error) error { return err }
