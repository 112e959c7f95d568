package sampler

import (
	"slices"
	"testing"
)

// TestGrid checks every window of a grid: C order per array, arrays in
// order, steps of Box - Overlap, the last window ending at the edge, and
// every voxel covered.
func TestGrid(t *testing.T) {
	dir := t.TempDir()
	shapes := [][]int64{{10, 7, 23}, {4, 16, 9}}
	var arrays []Array
	for i, sh := range shapes {
		arrays = append(arrays, Array{URI: writeU8(t, dir, string(rune('a'+i))+".zarr", sh, nil, zeros)})
	}
	box := []int64{4, 8, 6}
	tests := []struct {
		overlap  []int64
		fraction []float64
		step     []int64
	}{
		{nil, nil, []int64{4, 8, 6}},
		{[]int64{1, 3, 2}, nil, []int64{3, 5, 4}},
		{[]int64{2}, nil, []int64{2, 6, 4}},
		{nil, []float64{0.25}, []int64{3, 6, 4}},
		{nil, []float64{0.5, 0.9, 0}, []int64{2, 1, 6}},
	}
	for _, tt := range tests {
		s := mustNew(t, Config{Kind: Grid, Arrays: arrays, Box: box, Overlap: tt.overlap, OverlapFraction: tt.fraction})
		draws := all(s, 0)
		in := s.Info()
		var want int64
		at := 0
		for ai, sh := range shapes {
			counts := make([]int64, 3)
			n := int64(1)
			for k := range sh {
				counts[k] = 1
				if sh[k] > box[k] {
					counts[k] = (sh[k]-box[k]+tt.step[k]-1)/tt.step[k] + 1
				}
				n *= counts[k]
			}
			if !slices.Equal(in.Arrays[ai].Windows, counts) {
				t.Errorf("overlap %v %v: array %d windows %v, want %v", tt.overlap, tt.fraction, ai, in.Arrays[ai].Windows, counts)
			}
			want += n
			covered := make(map[[3]int64]bool)
			for w := int64(0); w < n; w++ {
				d := draws[at]
				idx := []int64{w / (counts[1] * counts[2]), w / counts[2] % counts[1], w % counts[2]}
				if d.Array != ai || d.Index != int64(at) || !slices.Equal(d.Window, idx) || d.URI != arrays[ai].URI {
					t.Fatalf("overlap %v %v: draw %d = %+v, want array %d window %v", tt.overlap, tt.fraction, at, d, ai, idx)
				}
				for k := range 3 {
					start := idx[k] * tt.step[k]
					if idx[k] == counts[k]-1 {
						start = max(sh[k]-box[k], 0)
					}
					if d.Box[k].Start != start || d.Box[k].Stop != start+box[k] {
						t.Fatalf("overlap %v %v: draw %d box %v, want start %d along axis %d", tt.overlap, tt.fraction, at, d.Box, start, k)
					}
				}
				for z := d.Box[0].Start; z < min(d.Box[0].Stop, sh[0]); z++ {
					for y := d.Box[1].Start; y < min(d.Box[1].Stop, sh[1]); y++ {
						for x := d.Box[2].Start; x < min(d.Box[2].Stop, sh[2]); x++ {
							covered[[3]int64{z, y, x}] = true
						}
					}
				}
				at++
			}
			if int64(len(covered)) != sh[0]*sh[1]*sh[2] {
				t.Errorf("overlap %v %v: array %d: %d voxels covered of %d", tt.overlap, tt.fraction, ai, len(covered), sh[0]*sh[1]*sh[2])
			}
		}
		if int64(len(draws)) != want || in.Total != want || s.Len() != want {
			t.Errorf("overlap %v %v: %d draws, total %d, Len %d; want %d", tt.overlap, tt.fraction, len(draws), in.Total, s.Len(), want)
		}
		// The grid is the same in every epoch.
		if again := all(s, 7); !slices.EqualFunc(again, draws, func(a, b Draw) bool { return slices.Equal(a.Box, b.Box) && a.Array == b.Array }) {
			t.Errorf("overlap %v %v: epoch 7's grid differs", tt.overlap, tt.fraction)
		}
	}
}
