package ptx

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// allOutputs are the output types, floats first.
var allOutputs = append([]Dtype{Float32, BFloat16}, outputInts...)

// A transformedScenario is a scenario whose samples have random
// transforms (most of them; the others keep the identity), with the
// output and misfit status expected, computed from the untransformed
// elements by the reference functions of transform_test.go.
type transformedScenario struct {
	*scenario
	ops     [][]refOp // each sample's numpy calls
	want    []byte
	misfits MisfitStatus
}

// newTransformedScenario builds a scenario of shape (see newScenario)
// with random transforms that keep the shape: flips, and permutations and
// rotations of axes of equal extent; and for float outputs, now and then
// an intensity map.
func newTransformedScenario(rng *rand.Rand, out Dtype, shape []int, specs []chunkSpec) (*transformedScenario, error) {
	sc, err := newScenario(rng, out, shape, specs)
	if err != nil {
		return nil, err
	}
	ts := &transformedScenario{scenario: sc, ops: make([][]refOp, len(specs))}
	for s := range specs {
		if rng.IntN(5) == 0 {
			continue
		}
		ops := shapePreservingOps(rng, shape, 4)
		tf := Identity()
		for _, o := range ops {
			if tf, err = o.compose(tf); err != nil {
				return nil, err
			}
		}
		if !out.IsInteger() && rng.IntN(2) == 0 {
			lo, hi := float32(math.Inf(-1)), float32(math.Inf(1))
			if rng.IntN(2) == 0 {
				lo, hi = float32(rng.NormFloat64()), float32(rng.NormFloat64()*100)
				lo, hi = min(lo, hi), max(lo, hi)
			}
			scale := float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
			if tf, err = tf.WithIntensity(scale, float32(rng.NormFloat64()*10), lo, hi); err != nil {
				return nil, err
			}
		}
		if err := sc.plan.SetTransform(s, tf); err != nil {
			return nil, err
		}
		ts.ops[s] = ops
	}
	per := int(sc.layout.SampleElems())
	moved := make([]srcElem, 0, len(sc.elems))
	for s := range specs {
		a := refApply(nd[srcElem]{shape, sc.elems[s*per : (s+1)*per]}, ts.ops[s])
		moved = append(moved, a.data...)
	}
	ts.want = encodeElems(moved, out, sc.plan.Transforms())
	if out.IsInteger() {
		for i, e := range moved {
			if _, ok := e.intBits(out); !ok {
				if ts.misfits.Count == 0 {
					ts.misfits.First = ^(uint64(i/per)<<32 | uint64(i%per))
					ts.misfits.Value, ts.misfits.Src = e.v, uint32(e.dtype)
				}
				ts.misfits.Count++
			}
		}
	}
	return ts, nil
}

// diff describes the first differing element of got and the expected
// output.
func (ts *transformedScenario) diff(got []byte) string {
	size := ts.layout.Dtype.Size()
	per := int(ts.layout.SampleElems())
	for i := 0; i < len(got); i += size {
		if !bytes.Equal(got[i:i+size], ts.want[i:i+size]) {
			s := i / size / per
			tf := Identity()
			if ts.plan.Transforms() != nil {
				tf = ts.plan.Transforms()[s]
			}
			return fmt.Sprintf("element %d (sample %d, %v, ops %v, intensity %v) = %x, want %x",
				i/size, s, ts.specs[s], ts.ops[s], tf.Intensity, got[i:i+size], ts.want[i:i+size])
		}
	}
	return ""
}

// eachTransformed runs f, in a subtest, on a transformed scenario of every
// source dtype x byte order x shuffle mode for every output type and
// ranks 1 to 5.
func eachTransformed(t *testing.T, f func(t *testing.T, rng *rand.Rand, ts *transformedScenario)) {
	rng := newRand(t)
	for _, out := range allOutputs {
		for rank := 1; rank <= 5; rank++ {
			t.Run(fmt.Sprintf("%v/rank%d", out, rank), func(t *testing.T) {
				ts, err := newTransformedScenario(rng, out, equalishShape(rng, rank), allSpecs())
				if err != nil {
					t.Fatal(err)
				}
				f(t, rng, ts)
			})
		}
	}
}

// checkMisfitErr checks err, AssembleHost's, against the expected status.
func (ts *transformedScenario) checkMisfitErr(t *testing.T, err error) {
	t.Helper()
	want := ts.misfits.Err(ts.layout)
	if want == nil {
		if err != nil {
			t.Errorf("error %v; want none", err)
		}
		return
	}
	var me *MisfitError
	if !errors.As(err, &me) || !reflect.DeepEqual(me, want) || !errors.Is(err, ErrMisfit) {
		t.Errorf("error %v; want %v", err, want)
	}
}

// TestAssembleHostTransforms runs every source dtype x byte order x
// shuffle mode into every output type, with random per-sample transforms,
// through AssembleHost and through HostAssembly.Run in a random order, and
// compares every element with the reference (np.flip, np.rot90 and
// np.transpose of the untransformed elements; the intensity map before
// bfloat16 rounding; integers passed through) and the misfit status with
// the one counted from the elements. Each output is poisoned twice, with
// different bytes, so that an element no op writes cannot pass.
func TestAssembleHostTransforms(t *testing.T) {
	eachTransformed(t, func(t *testing.T, rng *rand.Rand, ts *transformedScenario) {
		if got, want := ts.plan.NeedsCheck(), slices.ContainsFunc(ts.specs, func(s chunkSpec) bool { return NeedsCheck(s.dtype, ts.layout.Dtype) }); got != want {
			t.Errorf("plan NeedsCheck = %v; want %v", got, want)
		}
		for _, poison := range []byte{0xff, 0x00} {
			got := bytes.Repeat([]byte{poison}, int(ts.layout.Bytes()))
			err := AssembleHost(got, ts.layout, ts.arena, ts.plan.Ops(), ts.plan.Transforms(), []int{0, 1, 3}[rng.IntN(3)])
			if d := ts.diff(got); d != "" {
				t.Errorf("shape %v, poison %#x: %s", ts.layout.Shape, poison, d)
			}
			ts.checkMisfitErr(t, err)
		}
		got := poisoned(ts.layout.Bytes())
		a, err := NewHostAssembly(got, ts.layout, ts.arena, ts.plan.Ops(), ts.plan.Transforms())
		if err != nil {
			t.Fatal(err)
		}
		sc := NewHostScratch()
		for _, i := range rng.Perm(len(ts.plan.Ops())) {
			if err := a.Run([]int32{int32(i)}, 0, nil, sc); err != nil {
				t.Fatal(err)
			}
		}
		if d := ts.diff(got); d != "" {
			t.Errorf("Run, shape %v: %s", ts.layout.Shape, d)
		}
		if st := a.Misfits(); st != ts.misfits {
			t.Errorf("Run: misfits %+v; want %+v", st, ts.misfits)
		}
		if ts.layout.Dtype.IsInteger() {
			t.Logf("%d elements, %d misfits", ts.layout.Samples*int(ts.layout.SampleElems()), ts.misfits.Count)
		}
	})
}

// TestAssembleHostTransformErrors checks that AssembleHost refuses a
// transform table of the wrong length or with a transform that does not
// fit, and writes nothing.
func TestAssembleHostTransformErrors(t *testing.T) {
	l := Layout{Samples: 2, Shape: []int{3, 3, 4}, Dtype: Float32}
	op := Op{Extent: [MaxRank]uint32{3, 3, 4}}
	id := Identity()
	for _, tt := range []struct {
		name string
		out  Dtype
		ts   []Transform
	}{
		{"one for two samples", Float32, []Transform{id}},
		{"unequal extents", Float32, []Transform{id, must(id.Rot90(1, 1, 2))}},
		{"flip beyond rank", Float32, []Transform{must(id.Flip(5)), id}},
		{"intensity on integers", Uint8, []Transform{id, must(id.WithIntensity(1, 1, 0, 1))}},
	} {
		l.Dtype = tt.out
		out := poisoned(l.Bytes())
		if err := AssembleHost(out, l, nil, []Op{op}, tt.ts, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v; want ErrInvalid", tt.name, err)
		}
		if !bytes.Equal(out, poisoned(l.Bytes())) {
			t.Errorf("%s: output written despite the error", tt.name)
		}
	}
}

// BenchmarkAssembleHostTransforms measures the host twin on the
// throughput geometry with every sample flipped along its middle axis
// and, for the second case, an intensity map.
func BenchmarkAssembleHostTransforms(b *testing.B) {
	for _, intensity := range []bool{false, true} {
		b.Run(fmt.Sprintf("intensity=%v", intensity), func(b *testing.B) {
			l, arena, plan := throughputBatch(b, 4, Float32, NoShuffle)
			tf := must(Identity().Flip(1))
			if intensity {
				tf = must(tf.Normalize(2000, 1000, -3, 3))
			}
			for s := range l.Samples {
				if err := plan.SetTransform(s, tf); err != nil {
					b.Fatal(err)
				}
			}
			out := make([]byte, l.Bytes())
			b.SetBytes(l.Bytes())
			for b.Loop() {
				if err := AssembleHost(out, l, arena, plan.Ops(), plan.Transforms(), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAssembleHostIntFits runs, into each integer output type, only the
// source types whose every value fits it: the plan needs no check, no
// misfit is reported, and every element is its source value.
func TestAssembleHostIntFits(t *testing.T) {
	rng := newRand(t)
	for _, out := range outputInts {
		specs := slices.DeleteFunc(allSpecs(), func(s chunkSpec) bool { return NeedsCheck(s.dtype, out) })
		ts, err := newTransformedScenario(rng, out, equalishShape(rng, 1+rng.IntN(4)), specs)
		if err != nil {
			t.Fatal(err)
		}
		if ts.plan.NeedsCheck() || ts.misfits.Count != 0 {
			t.Errorf("%v from %d specs: plan NeedsCheck %v, %d misfits expected", out, len(specs), ts.plan.NeedsCheck(), ts.misfits.Count)
		}
		got := poisoned(ts.layout.Bytes())
		if err := AssembleHost(got, ts.layout, ts.arena, ts.plan.Ops(), ts.plan.Transforms(), 0); err != nil {
			t.Errorf("%v: %v", out, err)
		}
		if d := ts.diff(got); d != "" {
			t.Errorf("%v: %s", out, d)
		}
	}
}
