package sampler

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/pipeline"
)

// twoArrays writes arrays of 40x30x20 and 10x30x20 voxels (volumes 4:1).
func twoArrays(t *testing.T) (big, small string) {
	dir := t.TempDir()
	return writeU8(t, dir, "big.zarr", []int64{40, 30, 20}, nil, zeros), writeU8(t, dir, "small.zarr", []int64{10, 30, 20}, nil, zeros)
}

func TestDeterminism(t *testing.T) {
	big, small := twoArrays(t)
	cfg := Config{Arrays: []Array{{URI: big}, {URI: small}}, Box: []int64{8, 8, 8}, Seed: 42, SamplesPerEpoch: 50}
	a, b := all(mustNew(t, cfg), 3), all(mustNew(t, cfg), 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two samplers of one config draw differently")
	}
	if reflect.DeepEqual(a, all(mustNew(t, cfg), 4)) {
		t.Error("epochs 3 and 4 draw the same boxes")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, all(mustNew(t, cfg), 3)) {
		t.Error("seeds 42 and 43 draw the same boxes")
	}
	for i, d := range a {
		if d.Index != int64(i) {
			t.Fatalf("draw %d has index %d", i, d.Index)
		}
	}
}

// TestRanks checks that each rank's draws are those of the global
// sequence at its indices, that ranks are disjoint and cover the epoch,
// and the padding and dropping of an epoch that does not divide.
func TestRanks(t *testing.T) {
	big, small := twoArrays(t)
	for _, kind := range []Kind{Uniform, Grid} {
		for _, dropLast := range []bool{false, true} {
			cfg := Config{Kind: kind, Arrays: []Array{{URI: big}, {URI: small}}, Box: []int64{8, 8, 8}, Seed: 9, SamplesPerEpoch: 23, DropLast: dropLast}
			if kind == Grid {
				cfg.SamplesPerEpoch = 0
			}
			global := all(mustNew(t, cfg), 5)
			total := int64(len(global))
			const world = 4
			seen := map[int64]int{}
			for r := range world {
				cfg.Rank, cfg.World = r, world
				s := mustNew(t, cfg)
				want := (total + world - 1) / world
				if dropLast {
					want = total / world
				}
				draws := all(s, 5)
				if s.Len() != want || int64(len(draws)) != want {
					t.Fatalf("%v drop_last=%v rank %d: Len %d, %d draws, want %d", kind, dropLast, r, s.Len(), len(draws), want)
				}
				for i, d := range draws {
					g := int64(r + i*world)
					if g >= total {
						g -= total
					}
					if d.Index != g || !reflect.DeepEqual(d, global[g]) {
						t.Fatalf("%v rank %d draw %d = %+v, want global draw %d %+v", kind, r, i, d, g, global[g])
					}
					seen[g]++
				}
			}
			in := mustNew(t, cfg).Info()
			for g := range total {
				n := seen[g]
				switch {
				case dropLast && g >= total-total%world && n != 0:
					t.Errorf("%v drop_last: dropped index %d drawn %d times", kind, g, n)
				case dropLast && g < total-total%world && n != 1:
					t.Errorf("%v drop_last: index %d drawn %d times", kind, g, n)
				case !dropLast && g < in.Padded && n != 2:
					t.Errorf("%v: padded index %d drawn %d times, want 2", kind, g, n)
				case !dropLast && g >= in.Padded && n != 1:
					t.Errorf("%v: index %d drawn %d times", kind, g, n)
				}
			}
			if in.Padded+in.Dropped != (world-total%world)%world*boolInt(!dropLast)+total%world*boolInt(dropLast) {
				t.Errorf("%v drop_last=%v: padded %d, dropped %d of %d over %d ranks", kind, dropLast, in.Padded, in.Dropped, total, world)
			}
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestResume restores a rank at random positions: what it draws from
// there equals what the uninterrupted sequence draws.
func TestResume(t *testing.T) {
	big, small := twoArrays(t)
	cfg := Config{Arrays: []Array{{URI: big}, {URI: small}}, Box: []int64{8, 8, 8}, Seed: 1, Rank: 1, World: 3, SamplesPerEpoch: 100}
	s := mustNew(t, cfg)
	whole := all(s, 2)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		k := rng.Int64N(int64(len(whole)) + 1)
		again := all(mustNew(t, cfg), 0)[:0]
		for d := range mustNew(t, cfg).Seq(State{Epoch: 2, Next: k}) {
			again = append(again, d)
		}
		if !reflect.DeepEqual(again, whole[k:]) {
			t.Fatalf("resumed at %d: draws differ from the uninterrupted run", k)
		}
		if got := s.Draws(State{Epoch: 2, Next: k}, 7); !reflect.DeepEqual(got, whole[k:min(k+7, int64(len(whole)))]) {
			t.Fatalf("Draws(2, %d, 7) differ from the uninterrupted run", k)
		}
		i := k
		for smp := range s.Samples(State{Epoch: 2, Next: k}) {
			if !reflect.DeepEqual(smp, whole[i].Sample) {
				t.Fatalf("Samples from %d: sample %d = %v, want %v", k, i, smp, whole[i].Sample)
			}
			i++
		}
		if i != int64(len(whole)) {
			t.Fatalf("Samples from %d ended at %d, want %d", k, i, len(whole))
		}
	}
	// Infinite: the same draws as the finite sampler up to its padding
	// (its last draw, index 100, wraps to 0), and on past its end.
	cfg.Infinite, cfg.SamplesPerEpoch = true, 0
	inf := mustNew(t, cfg)
	if inf.Len() != -1 {
		t.Errorf("infinite Len = %d, want -1", inf.Len())
	}
	got := inf.Draws(State{Epoch: 2}, len(whole)+50)
	if n := len(whole) - 1; len(got) != len(whole)+50 || !reflect.DeepEqual(got[:n], whole[:n]) || got[n].Index != 100 || whole[n].Index != 0 {
		t.Errorf("infinite draws differ from the finite ones")
	}
}

// TestUniformBounds checks that boxes lie inside the array along axes at
// least as large as the box and start at 0 along the others, and that the
// starts reach both ends.
func TestUniformBounds(t *testing.T) {
	dir := t.TempDir()
	path := writeU8(t, dir, "a.zarr", []int64{12, 5, 30}, nil, zeros)
	box := []int64{4, 8, 30}
	s := mustNew(t, Config{Arrays: []Array{{URI: path}}, Box: box, Seed: 5, SamplesPerEpoch: 2000})
	lo, hi := int64(math.MaxInt64), int64(-1)
	for _, d := range all(s, 0) {
		r := d.Box
		if r[0].Start < 0 || r[0].Stop > 12 || r[1].Start != 0 || r[2].Start != 0 {
			t.Fatalf("box %v outside [12 5 30] or not at 0 where the array is smaller", r)
		}
		for k, b := range box {
			if r[k].Stop-r[k].Start != b {
				t.Fatalf("box %v, want extents %v", r, box)
			}
		}
		lo, hi = min(lo, r[0].Start), max(hi, r[0].Start)
	}
	if lo != 0 || hi != 8 {
		t.Errorf("starts along axis 0 span [%d, %d], want [0, 8]", lo, hi)
	}
}

// TestWeights checks the share of draws per array: by volume (4:1), by
// weight, and weight 0 never drawn. 20000 draws: a share is off by more
// than 0.015 with odds below 1e-6.
func TestWeights(t *testing.T) {
	big, small := twoArrays(t)
	tests := []struct {
		weights []float64
		want    float64 // share of the first array
	}{
		{[]float64{0, 0}, 0.8},
		{[]float64{1, 1}, 0.5},
		{[]float64{1, 3}, 0.25},
		{[]float64{0, 2}, 0},
	}
	for _, tt := range tests {
		cfg := Config{Arrays: []Array{{URI: big, Weight: tt.weights[0]}, {URI: small, Weight: tt.weights[1]}}, Box: []int64{4, 4, 4}, Seed: 11, SamplesPerEpoch: 20000}
		s := mustNew(t, cfg)
		n := 0
		for _, d := range all(s, 0) {
			if d.Array == 0 {
				n++
				if d.URI != big {
					t.Fatalf("draw of array 0 has URI %s", d.URI)
				}
			}
		}
		share := float64(n) / 20000
		if math.Abs(share-tt.want) > 0.015 || tt.want == 0 && n != 0 {
			t.Errorf("weights %v: share of array 0 = %.4f, want %.2f", tt.weights, share, tt.want)
		}
		if got := s.Info().Arrays[0].Weight; math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("weights %v: Info weight %v, want %v", tt.weights, got, tt.want)
		}
	}
}

// TestErrors checks that bad configs fail with the kind, the field and
// the URI.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	a := writeU8(t, dir, "a.zarr", []int64{10, 10, 10}, nil, zeros)
	img := writeNGFF(t, dir, "img.zarr", zyx, []int64{16, 16, 16}, 2, zeros)
	missing := filepath.Join(dir, "missing.zarr")
	box := []int64{4, 4, 4}
	ok := func(c Config) Config {
		if c.Box == nil {
			c.Box = box
		}
		if c.Kind != Grid && !c.Infinite && c.SamplesPerEpoch == 0 {
			c.SamplesPerEpoch = 10
		}
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		kind error
		says []string
	}{
		{"no arrays", Config{}, pipeline.ErrInvalid, []string{"Config.Arrays", "no arrays"}},
		{"bad kind", Config{Kind: 9, Arrays: []Array{{URI: a}}}, pipeline.ErrInvalid, []string{"Config.Kind"}},
		{"box rank", Config{Arrays: []Array{{URI: a}}, Box: []int64{4, 4}}, pipeline.ErrRank, []string{a, "Config.Box", "2 axes"}},
		{"box zero", Config{Arrays: []Array{{URI: a}}, Box: []int64{4, 0, 4}}, pipeline.ErrInvalid, []string{"Config.Box[1]"}},
		{"negative weight", Config{Arrays: []Array{{URI: a, Weight: -1}}}, pipeline.ErrInvalid, []string{a, "Config.Arrays[0].Weight"}},
		{"huge weights", Config{Arrays: []Array{{URI: a, Weight: math.MaxFloat64}, {URI: a, Weight: math.MaxFloat64}}}, pipeline.ErrInvalid, []string{"Config.Arrays", "scale them down"}},
		{"NaN weight", Config{Arrays: []Array{{URI: a}, {URI: a, Weight: math.NaN()}}}, pipeline.ErrInvalid, []string{"Config.Arrays[1].Weight"}},
		{"level of an array", Config{Arrays: []Array{{URI: a, Level: 1}}}, pipeline.ErrInvalid, []string{a, "Config.Arrays[0].Level", "plain array"}},
		{"level out of range", Config{Arrays: []Array{{URI: img, Level: 2}}}, pipeline.ErrInvalid, []string{img, "Config.Arrays[0].Level", "2 levels"}},
		{"missing", Config{Arrays: []Array{{URI: a}, {URI: missing}}}, pipeline.ErrNotFound, []string{missing}},
		{"rank", Config{Arrays: []Array{{URI: a}}, Rank: 2, World: 2}, pipeline.ErrInvalid, []string{"Config.Rank"}},
		{"no epoch length", Config{Arrays: []Array{{URI: a}}, SamplesPerEpoch: -1}, pipeline.ErrInvalid, []string{"Config.SamplesPerEpoch"}},
		{"infinite grid", Config{Kind: Grid, Arrays: []Array{{URI: a}}, Infinite: true}, pipeline.ErrInvalid, []string{"Config.Infinite"}},
		{"grid epoch", Config{Kind: Grid, Arrays: []Array{{URI: a}}, SamplesPerEpoch: 5}, pipeline.ErrInvalid, []string{"Config.SamplesPerEpoch"}},
		{"overlap", Config{Kind: Grid, Arrays: []Array{{URI: a}}, Overlap: []int64{1, 4, 1}}, pipeline.ErrInvalid, []string{"Config.Overlap[1]"}},
		{"overlap both", Config{Kind: Grid, Arrays: []Array{{URI: a}}, Overlap: []int64{1}, OverlapFraction: []float64{0.5}}, pipeline.ErrInvalid, []string{"Config.Overlap"}},
		{"overlap fraction", Config{Kind: Grid, Arrays: []Array{{URI: a}}, OverlapFraction: []float64{1}}, pipeline.ErrInvalid, []string{"Config.OverlapFraction[0]"}},
		{"overlap of uniform", Config{Arrays: []Array{{URI: a}}, Overlap: []int64{1}}, pipeline.ErrInvalid, []string{"Config.Overlap"}},
		{"label of uniform", Config{Arrays: []Array{{URI: a, Label: a}}}, pipeline.ErrInvalid, []string{"Config.Arrays[0].Label"}},
		{"fraction", Config{Kind: Foreground, Arrays: []Array{{URI: a}}, Fraction: 1.5}, pipeline.ErrInvalid, []string{"Config.Fraction"}},
		{"label missing", Config{Kind: Foreground, Arrays: []Array{{URI: a, Label: missing}}}, pipeline.ErrNotFound, []string{missing}},
		{"label level", Config{Kind: Foreground, Arrays: []Array{{URI: img}}, LabelLevel: 3}, pipeline.ErrInvalid, []string{img, "Config.LabelLevel"}},
		{"label too large", Config{Kind: Foreground, Arrays: []Array{{URI: img}}, MaxLabelVoxels: 100}, pipeline.ErrInvalid, []string{img, "Config.LabelLevel", "MaxLabelVoxels"}},
		{"no level small enough", Config{Kind: Foreground, Arrays: []Array{{URI: img}}, LabelLevel: AutoLevel, MaxLabelVoxels: 100}, pipeline.ErrInvalid, []string{img, "Config.MaxLabelVoxels"}},
	}
	for _, tt := range tests {
		s, err := New(context.Background(), ok(tt.cfg))
		if err == nil {
			t.Errorf("%s: New succeeded (%+v)", tt.name, s.Info())
			continue
		}
		var pe *pipeline.Error
		if !errors.As(err, &pe) || !errors.Is(err, tt.kind) {
			t.Errorf("%s: %v (%T), want a *pipeline.Error of kind %v", tt.name, err, err, tt.kind)
		}
		for _, w := range tt.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tt.name, err, w)
			}
		}
	}
	// A cancelled context stops New.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(ctx, ok(Config{Arrays: []Array{{URI: a}}})); !errors.Is(err, pipeline.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Errorf("New with a cancelled context: %v", err)
	}
}

func TestKind(t *testing.T) {
	for _, k := range []Kind{Uniform, Foreground, Grid} {
		if got, err := ParseKind(k.String()); got != k || err != nil {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if _, err := ParseKind("random"); !errors.Is(err, pipeline.ErrInvalid) || !strings.Contains(err.Error(), `"random"`) {
		t.Errorf("ParseKind(random): %v", err)
	}
	if s := Kind(7).String(); s != "Kind(7)" {
		t.Errorf("Kind(7).String() = %q", s)
	}
	if !slices.Equal(kindNames[:], []string{"uniform", "foreground", "grid"}) {
		t.Errorf("kind names %q", kindNames)
	}
}

// TestSampleSeed checks that every draw carries its seed for augmentation:
// a function of its epoch and global index only, distinct across both.
func TestSampleSeed(t *testing.T) {
	a := writeU8(t, t.TempDir(), "a.zarr", []int64{20, 20, 20}, nil, zeros)
	s := mustNew(t, Config{Arrays: []Array{{URI: a}}, Box: []int64{4, 4, 4}, Seed: 3, Rank: 1, World: 2, SamplesPerEpoch: 21})
	seen := map[uint64]bool{}
	for epoch := range int64(3) {
		for i := range s.Len() {
			d, _ := s.At(epoch, i)
			if d.Sample.Seed != SampleSeed(epoch, d.Index) || d.Sample.Seed == 0 || seen[d.Sample.Seed] {
				t.Fatalf("epoch %d draw %d: seed %d (SampleSeed %d), seen before %v", epoch, i, d.Sample.Seed, SampleSeed(epoch, d.Index), seen[d.Sample.Seed])
			}
			seen[d.Sample.Seed] = true
		}
	}
	if SampleSeed(2, 5) != 2<<40|5+1 {
		t.Fatalf("SampleSeed(2, 5) = %d", SampleSeed(2, 5))
	}
}
