package pipeline

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// nd is a C-ordered array of int32 for the transform tests.
type nd struct {
	shape []int
	data  []int32
}

func (a nd) strides() []int {
	s := make([]int, len(a.shape))
	n := 1
	for d := len(a.shape) - 1; d >= 0; d-- {
		s[d] = n
		n *= a.shape[d]
	}
	return s
}

// each calls f with every index of a, in C order.
func (a nd) each(f func(i int, idx []int)) {
	idx := make([]int, len(a.shape))
	for i := range a.data {
		f(i, idx)
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < a.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// flip is np.flip(a, axis).
func (a nd) flip(axis int) nd {
	out := nd{slices.Clone(a.shape), make([]int32, len(a.data))}
	st := a.strides()
	a.each(func(i int, idx []int) {
		src := 0
		for d, x := range idx {
			if d == axis {
				x = a.shape[d] - 1 - x
			}
			src += x * st[d]
		}
		out.data[i] = a.data[src]
	})
	return out
}

// transpose is np.transpose(a, perm).
func (a nd) transpose(perm []int) nd {
	shape := make([]int, len(perm))
	for j, p := range perm {
		shape[j] = a.shape[p]
	}
	out := nd{shape, make([]int32, len(a.data))}
	st := a.strides()
	out.each(func(i int, idx []int) {
		src := 0
		for j, x := range idx {
			src += x * st[perm[j]]
		}
		out.data[i] = a.data[src]
	})
	return out
}

// apply is the Transform's documented formula.
func (a nd) apply(t Transform) nd {
	out := a.transpose(t.Perm)
	for j, f := range t.Flip {
		if f {
			out = out.flip(j)
		}
	}
	return out
}

func randomND(rng *rand.Rand, shape []int) nd {
	a := nd{shape: shape}
	n := 1
	for _, x := range shape {
		n *= x
	}
	a.data = make([]int32, n)
	for i := range a.data {
		a.data[i] = rng.Int32()
	}
	return a
}

// TestDrawRot90 checks quarter turns against np.rot90's definition for
// k = 1, 2, 3: rot90(m, k, (x, y)) turns the first axis towards the second.
func TestDrawRot90(t *testing.T) {
	rng := newTestRand(t)
	a := randomND(rng, []int{2, 3, 3})
	seen := map[int]bool{}
	aug := &Augment{Seed: rng.Uint64(), Rot90: []PlaneChance{{Axes: [2]int{1, 2}, P: 1}}}
	for s := range uint64(64) {
		tr := aug.draw(a.shape, s)
		got := a.apply(tr)
		// np.rot90(m, 1, axes=(1, 2)) = np.transpose(np.flip(m, 2), (0, 2, 1)).
		want := a
		for k := 1; k <= 3; k++ {
			want = want.flip(2).transpose([]int{0, 2, 1})
			if slices.Equal(got.data, want.data) {
				seen[k] = true
				break
			}
			if k == 3 {
				t.Fatalf("seed %d: transform %+v is no quarter turn of axes 1, 2", s, tr)
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("k drawn: %v, want 1, 2 and 3", seen)
	}
}

// TestDrawDeterministic checks that a draw depends on the seeds only, that
// probabilities 0 and 1 mean never and always, and that intensity folds
// normalisation, scale and offset into one multiply and add.
func TestDrawDeterministic(t *testing.T) {
	aug := &Augment{Seed: 7, Flip: []AxisChance{{0, 0.5}, {1, 1}, {2, 0}},
		Permute: []AxesChance{{Axes: []int{1, 2}, P: 0.5}}, Scale: [2]float64{2, 2}, Offset: [2]float64{1, 1},
		Mean: 10, Std: 4, Clip: true, ClipLow: -1, ClipHigh: 1}
	shape := []int{4, 5, 5}
	flips := 0
	for s := range uint64(100) {
		a, b := aug.draw(shape, s), aug.draw(shape, s)
		if !slices.Equal(a.Perm, b.Perm) || !slices.Equal(a.Flip, b.Flip) || a.Scale != b.Scale {
			t.Fatalf("seed %d: two draws differ: %+v, %+v", s, a, b)
		}
		if a.Flip[0] {
			flips++
		}
		// Axis 1 is flipped always; the permutation may move it to 2.
		if a.Flip[2] == a.Flip[1] || a.Perm[0] != 0 {
			t.Fatalf("seed %d: %+v", s, a)
		}
		if !a.Intensity || a.Scale != 0.5 || a.Offset != -4 || a.Low != -1 || a.High != 1 {
			t.Fatalf("seed %d: intensity %+v, want scale 0.5, offset -4 = (v-10)/4*2+1, clip [-1, 1]", s, a)
		}
	}
	if flips < 30 || flips > 70 {
		t.Fatalf("axis 0 flipped %d times of 100 with probability 0.5", flips)
	}
}

// TestTransformProject checks that a source lacking an axis of the box sees
// the transform of the axes it has: transforming the box then dropping the
// axis equals dropping it then transforming with the projection.
func TestTransformProject(t *testing.T) {
	rng := newTestRand(t)
	box := randomND(rng, []int{1, 3, 3, 3}) // c, z, y, x; the label lacks c
	aug := &Augment{Seed: rng.Uint64(), Flip: []AxisChance{{1, 0.5}, {2, 0.5}, {3, 0.5}},
		Rot90: []PlaneChance{{Axes: [2]int{2, 3}, P: 0.7}}, Permute: []AxesChance{{Axes: []int{1, 2, 3}, P: 0.5}}}
	label := nd{box.shape[1:], box.data}
	m := axisMap{1, 2, 3}
	for s := range uint64(50) {
		tr := aug.draw(box.shape, s)
		pt, err := tr.project(m, "label")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := label.apply(pt), box.apply(tr); !slices.Equal(got.data, want.data) {
			t.Fatalf("seed %d: projected %+v of %+v differs", s, pt, tr)
		}
	}
	tr := Transform{Perm: []int{1, 0, 2, 3}, Flip: make([]bool, 4)}
	if _, err := tr.project(m, "label"); err == nil {
		t.Fatal("a transform moving the channel axis onto z projected onto a zyx source")
	}
}
