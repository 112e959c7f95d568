package sampler

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/writer"
)

// cubes returns a fill function with value inside n random cubes of edge
// (aligned to edge, at least edge from every border of shape, which has 3
// space axes at its end) and 0 elsewhere.
func cubes(seed uint64, n int, edge int64, shape []int64, value uint8) func([]int64) uint8 {
	rng := rand.New(rand.NewPCG(seed, 0))
	space := shape[len(shape)-3:]
	var at [][3]int64
	for range n {
		var c [3]int64
		for k, s := range space {
			c[k] = edge * (1 + rng.Int64N(s/edge-2))
		}
		at = append(at, c)
	}
	return func(c []int64) uint8 {
		c = c[len(c)-3:]
		for _, a := range at {
			if c[0] >= a[0] && c[0] < a[0]+edge && c[1] >= a[1] && c[1] < a[1]+edge && c[2] >= a[2] && c[2] < a[2]+edge {
				return value
			}
		}
		return 0
	}
}

// centreHits returns the share of draws whose centre voxel (start +
// extent/2 along each axis) has fg != 0, and the share flagged Foreground.
func centreHits(draws []Draw, fg func([]int64) uint8) (hit, flagged float64) {
	c := make([]int64, len(draws[0].Box))
	nh, nf := 0, 0
	for _, d := range draws {
		for k, r := range d.Box {
			c[k] = r.Start + (r.Stop-r.Start)/2
		}
		if fg(c) != 0 {
			nh++
		}
		if d.Foreground {
			nf++
		}
	}
	return float64(nh) / float64(len(draws)), float64(nf) / float64(len(draws))
}

// TestForegroundNGFF samples an image whose label is an OME-NGFF image
// of 3 levels with sparse foreground (0.8% of the voxels), searched on
// its coarsest level (16^3).
func TestForegroundNGFF(t *testing.T) {
	dir := t.TempDir()
	shape := []int64{64, 64, 64}
	fg := cubes(1, 4, 8, shape, 1)
	img := writeNGFF(t, dir, "img.zarr", zyx, shape, 1, zeros)
	label := writeNGFF(t, dir, "label.zarr", zyx, shape, 3, fg)
	empty := writeNGFF(t, dir, "empty.zarr", zyx, shape, 3, zeros)
	cfg := Config{Kind: Foreground, Arrays: []Array{{URI: img, Label: label}}, Box: []int64{6, 6, 6}, Seed: 3, SamplesPerEpoch: 4000,
		Fraction: 1, LabelLevel: AutoLevel, MaxLabelVoxels: 16 * 16 * 16}
	s := mustNew(t, cfg)
	in := s.Info()
	if a := in.Arrays[0]; a.Label != label || a.LabelLevel != 2 || a.ForegroundVoxels != 4*8 || in.NoForeground != 0 {
		t.Errorf("info %+v", in)
	}
	if hit, flagged := centreHits(all(s, 0), fg); hit != 1 || flagged != 1 {
		t.Errorf("fraction 1: %.3f of the centres on foreground, %.3f flagged; want 1, 1", hit, flagged)
	}

	// A share: flagged about 0.3 of the draws, and those hit.
	cfg.Fraction = 0.3
	hit, flagged := centreHits(all(mustNew(t, cfg), 0), fg)
	if math.Abs(flagged-0.3) > 0.03 || hit < flagged || hit > flagged+0.02 {
		t.Errorf("fraction 0.3: %.3f of the centres on foreground, %.3f flagged", hit, flagged)
	}
	// Uniform boxes hit far less often.
	u := Config{Arrays: cfg.Arrays[:1], Box: cfg.Box, Seed: 3, SamplesPerEpoch: 4000}
	u.Arrays = []Array{{URI: img}}
	if hit, _ := centreHits(all(mustNew(t, u), 0), fg); hit > 0.03 {
		t.Errorf("uniform: %.3f of the centres on foreground", hit)
	}

	// An array whose label has no foreground falls back to uniform, and
	// says so.
	cfg.Fraction = 1
	cfg.Arrays = append(cfg.Arrays, Array{URI: img, Label: empty})
	s = mustNew(t, cfg)
	if in := s.Info(); in.NoForeground != 1 || in.Arrays[1].ForegroundVoxels != 0 {
		t.Errorf("info with an empty label: %+v", in)
	}
	n1 := 0
	for _, d := range all(s, 0) {
		if d.Array == 1 {
			n1++
			if d.Foreground {
				t.Fatalf("a draw of the array without foreground is flagged: %+v", d)
			}
		} else if !d.Foreground {
			t.Fatalf("a draw of the array with foreground is not flagged: %+v", d)
		}
	}
	if n1 < 1800 || n1 > 2200 {
		t.Errorf("%d of 4000 draws from the second array, want about 2000", n1)
	}

	// An explicit level: the finest.
	cfg.Arrays, cfg.LabelLevel, cfg.MaxLabelVoxels = cfg.Arrays[:1], 0, -1
	s = mustNew(t, cfg)
	if a := s.Info().Arrays[0]; a.LabelLevel != 0 || a.ForegroundVoxels != 4*512 {
		t.Errorf("level 0: %+v", a)
	}
	if hit, _ := centreHits(all(s, 0), fg); hit != 1 {
		t.Errorf("level 0: %.3f of the centres on foreground", hit)
	}
}

// TestForegroundAxes samples a czyx image whose label is zyx: the axes
// match by name, the channel is drawn uniformly.
func TestForegroundAxes(t *testing.T) {
	dir := t.TempDir()
	shape := []int64{3, 32, 48, 40}
	fg := cubes(2, 3, 8, shape[1:], 1)
	img := writeNGFF(t, dir, "img.zarr", czyx, shape, 2, zeros)
	label := writeNGFF(t, dir, "label.zarr", zyx, shape[1:], 2, fg)
	s := mustNew(t, Config{Kind: Foreground, Arrays: []Array{{URI: img, Label: label}}, Box: []int64{1, 5, 5, 5}, Seed: 8, SamplesPerEpoch: 600, Fraction: 1, LabelLevel: 1})
	channels := map[int64]int{}
	for _, d := range all(s, 0) {
		channels[d.Box[0].Start]++
		c := []int64{d.Box[1].Start + 2, d.Box[2].Start + 2, d.Box[3].Start + 2}
		if fg(c) == 0 {
			t.Fatalf("box %v: centre %v is not foreground", d.Box, c)
		}
	}
	if len(channels) != 3 || channels[0] < 150 || channels[2] < 150 {
		t.Errorf("channel starts %v, want about 200 of each of 0, 1, 2", channels)
	}

	// Boxes read at level 1 of the image: the label's level 1 maps onto it.
	s = mustNew(t, Config{Kind: Foreground, Arrays: []Array{{URI: img, Level: 1, Label: label}}, Box: []int64{1, 3, 3, 3}, Seed: 8, SamplesPerEpoch: 300, Fraction: 1, LabelLevel: 1})
	for _, d := range all(s, 0) {
		c := []int64{2 * (d.Box[1].Start + 1), 2 * (d.Box[2].Start + 1), 2 * (d.Box[3].Start + 1)}
		if d.Level != 1 || fg(c) == 0 {
			t.Fatalf("level-1 box %v: level-0 voxel %v of its centre is not foreground", d.Box, c)
		}
	}

	// Axes that do not match.
	tyx := []writer.Axis{{Name: "t", Type: "time"}, {Name: "y", Type: "space"}, {Name: "x", Type: "space"}}
	bad := writeNGFF(t, dir, "tyx.zarr", tyx, shape[1:], 1, zeros)
	_, err := New(context.Background(), Config{Kind: Foreground, Arrays: []Array{{URI: img, Label: bad}}, Box: []int64{1, 5, 5, 5}, SamplesPerEpoch: 5})
	if !errors.Is(err, pipeline.ErrRank) || !strings.Contains(err.Error(), `"t"`) || !strings.Contains(err.Error(), "Config.Arrays[0].Label") {
		t.Errorf("a tyx label for a czyx image: %v", err)
	}
	plain := writeU8(t, dir, "plain.zarr", shape[1:], nil, zeros)
	_, err = New(context.Background(), Config{Kind: Foreground, Arrays: []Array{{URI: img, Label: plain}}, Box: []int64{1, 5, 5, 5}, SamplesPerEpoch: 5})
	if !errors.Is(err, pipeline.ErrRank) || !strings.Contains(err.Error(), "axis names") {
		t.Errorf("an unnamed 3-d label for a 4-d image: %v", err)
	}
}

// TestForegroundPlain uses plain arrays: a label at half resolution,
// mapped by the ratio of the shapes, and a thresholded image.
func TestForegroundPlain(t *testing.T) {
	dir := t.TempDir()
	shape := []int64{48, 64, 40}
	half := []int64{24, 32, 20}
	coarse := cubes(5, 4, 4, half, 1)
	fine := func(c []int64) uint8 { return coarse([]int64{c[0] / 2, c[1] / 2, c[2] / 2}) }
	img := writeU8(t, dir, "img.zarr", shape, nil, zeros)
	label := writeU8(t, dir, "label.zarr", half, nil, coarse)
	s := mustNew(t, Config{Kind: Foreground, Arrays: []Array{{URI: img, Label: label}}, Box: []int64{7, 7, 7}, Seed: 4, SamplesPerEpoch: 1000, Fraction: 1})
	if hit, _ := centreHits(all(s, 0), fine); hit != 1 {
		t.Errorf("half-resolution label: %.3f of the centres on foreground", hit)
	}

	bright := cubes(6, 5, 8, shape, 200)
	lit := writeU8(t, dir, "lit.zarr", shape, []string{"z", "y", "x"}, func(c []int64) uint8 { return max(10, bright(c)) })
	s = mustNew(t, Config{Kind: Foreground, Arrays: []Array{{URI: lit}}, Box: []int64{6, 6, 6}, Seed: 4, SamplesPerEpoch: 1000, Fraction: 1, Threshold: 100})
	if hit, _ := centreHits(all(s, 0), bright); hit != 1 {
		t.Errorf("thresholded image: %.3f of the centres above the threshold", hit)
	}
	if a := s.Info().Arrays[0]; a.Label != lit || a.ForegroundVoxels != 5*512 || a.Axes == nil {
		t.Errorf("thresholded image: %+v", a)
	}
	s = mustNew(t, Config{Kind: Foreground, Arrays: []Array{{URI: lit}}, Box: []int64{6, 6, 6}, SamplesPerEpoch: 10, Threshold: 200})
	if s.Info().NoForeground != 1 {
		t.Errorf("threshold 200 (nothing above): %+v", s.Info())
	}
}

func TestHalf(t *testing.T) {
	tests := []struct {
		in   uint16
		want float64
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x0001, math.Ldexp(1, -24)}, {0x7bff, 65504}, {0x7c00, math.Inf(1)}, {0xfc00, math.Inf(-1)},
	}
	for _, tt := range tests {
		if got := half(tt.in); got != tt.want {
			t.Errorf("half(%#04x) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if !math.IsNaN(half(0x7e00)) {
		t.Errorf("half(0x7e00) is not NaN")
	}
}
