package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr"
)

// labelDataset is a small dataset with label images: czyx images of two
// dtypes, a uint8 label over z, y, x.
func labelDataset() DatasetSpec {
	return DatasetSpec{Arrays: 2, Shape: []int64{1, 32, 64, 64}, Chunk: []int64{1, 16, 32, 32}, Shard: []int64{1, 32, 64, 64},
		Dtype: NameList{"uint16", "float32"}, Codec: NameList{"zstd"}, Level: 3, Entropy: 0.5, Seed: 7,
		Labels: &LabelSpec{Name: "cells", Dtype: "uint8", Chunk: []int64{16, 32, 32}, Shard: []int64{32, 64, 64}, Codec: "zstd", Foreground: 0.1}}
}

// readAll reads the whole of a's data.
func readAll(t *testing.T, a *zarr.Array) []byte {
	t.Helper()
	var box []zarr.Range
	for _, n := range a.Shape() {
		box = append(box, zarr.Range{Start: 0, Stop: n})
	}
	reg, err := a.ReadRegion(box)
	if err != nil {
		t.Fatal(err)
	}
	return reg.Data
}

// TestGenerateLabels: each image gets an OME-NGFF label image at
// labels/cells that zarr.OpenNGFF reads, over the image's space axes,
// with nearest-downsampled levels, blobs of values 1..3 over about the
// asked share of voxels, the image brighter inside them, and the same
// bytes from the same seed.
func TestGenerateLabels(t *testing.T) {
	d := labelDataset()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	var stderr bytes.Buffer
	if _, err := ensureDataset(context.Background(), Env{Stderr: &stderr}, &d, dir, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), `wrote 2 images with label images "cells"`) {
		t.Errorf("summary %q does not name the label images", stderr.String())
	}
	marker, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil || !bytes.Contains(marker, []byte(`"foreground": 0.1`)) {
		t.Errorf("marker %s (%v) does not record the labels", marker, err)
	}
	for i := range d.Arrays {
		img := filepath.Join(dir, ArrayName(i))
		var group struct {
			Attributes struct {
				OME struct {
					Version string   `json:"version"`
					Labels  []string `json:"labels"`
				} `json:"ome"`
			} `json:"attributes"`
		}
		b, err := os.ReadFile(filepath.Join(img, "labels", "zarr.json"))
		if err != nil || json.Unmarshal(b, &group) != nil || group.Attributes.OME.Version != "0.5" || !slices.Equal(group.Attributes.OME.Labels, []string{"cells"}) {
			t.Fatalf("labels/zarr.json = %s (%v); want ome 0.5 labels [cells]", b, err)
		}
		b, err = os.ReadFile(filepath.Join(img, "labels", "cells", "zarr.json"))
		if err != nil || !bytes.Contains(b, []byte(`"image-label"`)) || !bytes.Contains(b, []byte(`"image": "../../"`)) {
			t.Errorf("labels/cells/zarr.json lacks image-label metadata: %s (%v)", b, err)
		}
		m, err := zarr.OpenNGFF(filepath.Join(img, "labels", "cells"))
		if err != nil {
			t.Fatal(err)
		}
		var axes []string
		for _, a := range m.Axes() {
			axes = append(axes, a.Name)
		}
		// 32*64*64 voxels is under labelCoarsest: one level.
		if !slices.Equal(axes, []string{"z", "y", "x"}) || len(m.Levels()) != 1 {
			t.Errorf("label image: axes %v, %d levels; want z, y, x and 1", axes, len(m.Levels()))
		}
		lab, err := m.Level(0)
		if err != nil {
			t.Fatal(err)
		}
		if lab.DataType() != zarr.Uint8 || !slices.Equal(lab.Shape(), []int64{32, 64, 64}) {
			t.Errorf("label level 0: %v %v; want uint8 [32 64 64]", lab.DataType(), lab.Shape())
		}
		labels := readAll(t, lab)
		counts := map[byte]int{}
		for _, v := range labels {
			counts[v]++
		}
		fg := 1 - float64(counts[0])/float64(len(labels))
		if len(counts) != labelValues+1 || fg < 0.05 || fg > 0.15 {
			t.Errorf("image %d: label values %v, foreground %.3f; want 0..%d over about 0.1", i, counts, fg, labelValues)
		}
		im, err := zarr.OpenNGFF(img)
		if err != nil {
			t.Fatal(err)
		}
		a, err := im.Level(0)
		if err != nil {
			t.Fatal(err)
		}
		data := readAll(t, a)
		var in, out, nin, nout float64
		for k, v := range labels {
			var x float64
			if a.DataType() == zarr.Uint16 {
				x = float64(binary.LittleEndian.Uint16(data[2*k:]))
			} else {
				x = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*k:])))
			}
			if v != 0 {
				in, nin = in+x, nin+1
			} else {
				out, nout = out+x, nout+1
			}
		}
		if in/nin <= out/nout {
			t.Errorf("image %d (%v): mean %.3f inside the blobs, %.3f outside; want brighter inside", i, a.DataType(), in/nin, out/nout)
		}
	}

	// The same parameters elsewhere: the same bytes.
	again := filepath.Join(t.TempDir(), "again")
	if _, err := ensureDataset(context.Background(), Env{Stderr: io.Discard}, &d, again, false); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"a001/labels/cells", "a001"} {
		m1, err1 := zarr.OpenNGFF(filepath.Join(dir, rel))
		m2, err2 := zarr.OpenNGFF(filepath.Join(again, rel))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		a1, _ := m1.Level(0)
		a2, _ := m2.Level(0)
		if !bytes.Equal(readAll(t, a1), readAll(t, a2)) {
			t.Errorf("%s differs between two generations from the same seed", rel)
		}
	}
}

// TestLabelLevels: a label image larger than labelCoarsest voxels gets
// levels down to it, each taking every other voxel of the one above.
func TestLabelLevels(t *testing.T) {
	for _, tt := range []struct {
		shape []int64
		want  int
	}{{[]int64{64, 64}, 1}, {[]int64{128, 128, 64}, 1}, {[]int64{128, 128, 128}, 2}, {[]int64{256, 512, 512}, 3}, {[]int64{1 << 20, 2}, 2}} {
		if got := labelLevels(tt.shape); got != tt.want {
			t.Errorf("labelLevels(%v) = %d; want %d", tt.shape, got, tt.want)
		}
	}
	d := DatasetSpec{Arrays: 1, Shape: []int64{64, 256, 128}, Chunk: []int64{32, 64, 64},
		Dtype: NameList{"uint8"}, Codec: NameList{"zstd"}, Entropy: 0.5, Seed: 3,
		Labels: &LabelSpec{Name: "nuclei", Dtype: "uint16", Codec: "zstd", Foreground: 0.2}}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := ensureDataset(context.Background(), Env{Stderr: io.Discard}, &d, dir, false); err != nil {
		t.Fatal(err)
	}
	m, err := zarr.OpenNGFF(filepath.Join(dir, "a000", "labels", "nuclei"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Levels()) != 2 {
		t.Fatalf("%d levels; want 2", len(m.Levels()))
	}
	l0, _ := m.Level(0)
	l1, _ := m.Level(1)
	if got := l0.ChunkShape(); !slices.Equal(got, []int64{32, 64, 64}) {
		t.Errorf("label chunks %v; want the image's [32 64 64]", got)
	}
	// A 2-D image's label image is 2-D.
	flat := DatasetSpec{Arrays: 1, Shape: []int64{96, 80}, Chunk: []int64{32, 32}, Shard: []int64{96, 96},
		Dtype: NameList{"int16"}, Codec: NameList{"zstd"}, Entropy: 0.5, Seed: 3,
		Labels: &LabelSpec{Name: "spots", Dtype: "int32", Codec: "gzip", Foreground: 0.3}}
	if err := flat.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureDataset(context.Background(), Env{Stderr: io.Discard}, &flat, filepath.Join(dir, "flat"), false); err != nil {
		t.Fatal(err)
	}
	fm, err := zarr.OpenNGFF(filepath.Join(dir, "flat", "a000", "labels", "spots"))
	if err != nil {
		t.Fatal(err)
	}
	fl, _ := fm.Level(0)
	on := 0
	for _, v := range slices.Collect(slices.Chunk(readAll(t, fl), 4)) {
		if binary.LittleEndian.Uint32(v) != 0 {
			on++
		}
	}
	if !slices.Equal(fl.Shape(), []int64{96, 80}) || fl.DataType() != zarr.Int32 || on < 96*80/6 || on > 96*80/2 {
		t.Errorf("2-D label image: %v %v, %d of %d voxels on; want [96 80] int32, about 30%%", fl.Shape(), fl.DataType(), on, 96*80)
	}
	fine, coarse := readAll(t, l0), readAll(t, l1)
	s0, s1 := l0.Shape(), l1.Shape()
	for z := range s1[0] {
		for y := range s1[1] {
			for x := range s1[2] {
				want := fine[2*(2*z*s0[1]*s0[2]+2*y*s0[2]+2*x):]
				got := coarse[2*(z*s1[1]*s1[2]+y*s1[2]+x):]
				if got[0] != want[0] || got[1] != want[1] {
					t.Fatalf("level 1 at %d,%d,%d is %v; level 0 at twice that is %v", z, y, x, got[:2], want[:2])
				}
			}
		}
	}
}

// TestBlobsPaint: painting a box is painting the whole image and cutting
// the box out, so blocks of any size write the same label image.
func TestBlobsPaint(t *testing.T) {
	for _, space := range [][]int64{{20, 40, 30}, {50, 70}} {
		b := newBlobs(space, 0.3, 11)
		whole := make([]byte, 2*2*2*20*40*30)
		var all []zarr.Range
		for _, n := range space {
			all = append(all, zarr.Range{Start: 0, Stop: n})
		}
		b.paint(whole, all)
		box := slices.Clone(all)
		box[0] = zarr.Range{Start: 3, Stop: 17}
		box[len(box)-1] = zarr.Range{Start: 5, Stop: 29}
		part := make([]byte, len(whole))
		b.paint(part, box)
		n := int64(1)
		for _, r := range box {
			n *= r.Len()
		}
		for k := range n {
			// The part's coordinates, then the whole's index.
			var idx, rest, stride int64 = 0, k, 1
			for d := len(box) - 1; d >= 0; d-- {
				c := rest % box[d].Len()
				rest /= box[d].Len()
				idx += (c + box[d].Start) * stride
				stride *= space[d]
			}
			if part[k] != whole[idx] {
				t.Fatalf("space %v: box voxel %d is %d, the whole image's %d", space, k, part[k], whole[idx])
			}
		}
	}
}
