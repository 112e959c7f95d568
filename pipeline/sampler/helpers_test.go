package sampler

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// uint8At returns the data of a uint8 array of shape whose voxel at
// coordinate c is f(c).
func uint8At(shape []int64, f func(c []int64) uint8) []byte {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	data := make([]byte, n)
	c := make([]int64, len(shape))
	for i := range data {
		rem := int64(i)
		for k := len(shape) - 1; k >= 0; k-- {
			c[k] = rem % shape[k]
			rem /= shape[k]
		}
		data[i] = f(c)
	}
	return data
}

// wholeBox is the box of a whole array of shape.
func wholeBox(shape []int64) []zarr.Range {
	box := make([]zarr.Range, len(shape))
	for k, n := range shape {
		box[k] = zarr.Range{Start: 0, Stop: n}
	}
	return box
}

// chunkOf returns a chunk shape of at most 8 along each axis.
func chunkOf(shape []int64) []int64 {
	c := make([]int64, len(shape))
	for k, n := range shape {
		c[k] = min(n, 8)
	}
	return c
}

// writeU8 writes a plain uint8 zarr v3 array (with dimension names when
// names is not nil) under dir and returns its path.
func writeU8(t testing.TB, dir, name string, shape []int64, names []string, f func(c []int64) uint8) string {
	t.Helper()
	path := filepath.Join(dir, name)
	w, err := writer.Create(path, writer.Spec{Shape: shape, ChunkShape: chunkOf(shape), DataType: zarr.Uint8, DimensionNames: names})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRegion(wholeBox(shape), uint8At(shape, f)); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeNGFF writes an OME-NGFF uint8 image of levels levels (mean
// downsampling over the space axes) and returns its path.
func writeNGFF(t testing.TB, dir, name string, axes []writer.Axis, shape []int64, levels int, f func(c []int64) uint8) string {
	t.Helper()
	path := filepath.Join(dir, name)
	m, err := writer.CreateNGFF(path, writer.NGFFSpec{Axes: axes, Levels: levels,
		Array: writer.Spec{Shape: shape, ChunkShape: chunkOf(shape), DataType: zarr.Uint8}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Level(0).WriteRegion(wholeBox(shape), uint8At(shape, f)); err != nil {
		t.Fatal(err)
	}
	if err := m.Downsample(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	return path
}

// zyx are the space axes of a 3-d image.
var zyx = []writer.Axis{{Name: "z", Type: "space"}, {Name: "y", Type: "space"}, {Name: "x", Type: "space"}}

// czyx are the axes of a 4-d image with channels.
var czyx = append([]writer.Axis{{Name: "c", Type: "channel"}}, zyx...)

// zeros is a fill function of an empty array.
func zeros([]int64) uint8 { return 0 }

// mustNew makes a sampler or fails the test.
func mustNew(t testing.TB, cfg Config) *Sampler {
	t.Helper()
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// all returns every draw of this rank's epoch.
func all(s *Sampler, epoch int64) []Draw {
	var out []Draw
	for d := range s.Seq(State{Epoch: epoch}) {
		out = append(out, d)
	}
	return out
}
