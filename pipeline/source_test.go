package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// imageWithLabel writes an OME-NGFF 0.5 image (axes c, z, y, x; uint16;
// two levels) with a label image "cells" (axes z, y, x; uint8) under
// labels/, both of random data, and returns the image's path.
func imageWithLabel(t testing.TB, dir string, seed uint64) string {
	t.Helper()
	img := filepath.Join(dir, "img.zarr")
	space := func(n string) writer.Axis { return writer.Axis{Name: n, Type: "space"} }
	write := func(path string, axes []writer.Axis, spec writer.Spec, s uint64) {
		m, err := writer.CreateNGFF(path, writer.NGFFSpec{Axes: axes, Levels: 2, Downsampling: writer.Nearest, Array: spec})
		if err != nil {
			t.Fatal(err)
		}
		syn := &writer.Synth{Seed: s, DataType: spec.DataType, Shape: spec.Shape, Amplitude: 0.5, NoiseBits: 3, RandomFraction: 0.3}
		if err := m.Level(0).WriteFrom(context.Background(), 2, syn.Fill); err != nil {
			t.Fatal(err)
		}
		if err := m.Downsample(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
	}
	write(img, []writer.Axis{{Name: "c", Type: "channel"}, space("z"), space("y"), space("x")},
		writer.Spec{DataType: zarr.Uint16, Shape: []int64{2, 20, 36, 40}, ChunkShape: []int64{1, 8, 16, 16},
			Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}, seed)
	write(filepath.Join(img, "labels", "cells"), []writer.Axis{space("z"), space("y"), space("x")},
		writer.Spec{DataType: zarr.Uint8, Shape: []int64{20, 36, 40}, ChunkShape: []int64{8, 8, 16},
			ShardShape: []int64{16, 16, 32}, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}, seed+1)
	labels := `{"zarr_format":3,"node_type":"group","attributes":{"ome":{"version":"0.5","labels":["cells"]}}}`
	if err := os.WriteFile(filepath.Join(img, "labels", "zarr.json"), []byte(labels), 0o644); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestSources reads an image and its label in one pipeline and checks
// each tensor against the reference reader's read of its box: the label
// drops the image's channel axis.
func TestSources(t *testing.T) {
	rng := newTestRand(t)
	img := imageWithLabel(t, t.TempDir(), rng.Uint64())
	for _, level := range []int{0, 1} {
		cfg := Config{BatchSize: 3, Device: "cpu", Sources: []Source{
			{Name: "image", Dtype: BF16},
			{Name: "label", Label: "cells"},
		}}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := zarr.OpenNGFF(img)
		if err != nil {
			t.Fatal(err)
		}
		ia, err := ms.Level(level)
		if err != nil {
			t.Fatal(err)
		}
		lms, err := zarr.OpenNGFF(filepath.Join(img, "labels", "cells"))
		if err != nil {
			t.Fatal(err)
		}
		la, err := lms.Level(level)
		if err != nil {
			t.Fatal(err)
		}
		var samples []Sample
		for range 7 {
			samples = append(samples, Sample{URI: img, Level: level, Box: randomBox(rng, ia.Shape(), []int{2, 6, 8, 10})})
		}
		if err := p.Push(samples...); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		done := 0
		for b, err := range p.Batches(context.Background(), 3) {
			if err != nil {
				t.Fatal(err)
			}
			if names := []string{b.Tensors()[0].Name(), b.Tensors()[1].Name()}; names[0] != "image" || names[1] != "label" {
				t.Fatalf("tensor names %v", names)
			}
			li := b.Tensor("label").Info()
			if want := []int64{int64(b.Len()), 6, 8, 10}; !equalInt64(li.Shape, want) || li.Dtype != F32 {
				t.Fatalf("label tensor %v %v, want %v float32", li.Shape, li.Dtype, want)
			}
			if ii := b.Info(); ii.Dtype != BF16 || ii.Shape[1] != 2 {
				t.Fatalf("image tensor %v %v", ii.Shape, ii.Dtype)
			}
			img, lab := b.Tensor("image").Bytes(), b.Tensor("label").Bytes()
			ib, lb := len(img)/b.Len(), len(lab)/b.Len()
			for i, s := range b.Samples() {
				reg, err := ia.ReadRegion(s.Box)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(img[i*ib:(i+1)*ib], expected(reg, BF16)) {
					t.Fatalf("level %d: image of sample %d (%s) differs", level, done+i, s)
				}
				if reg, err = la.ReadRegion(s.Box[1:]); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(lab[i*lb:(i+1)*lb], expected(reg, F32)) {
					t.Fatalf("level %d: label of sample %d (%s) differs", level, done+i, s)
				}
			}
			done += b.Len()
			b.Release()
		}
		if done != len(samples) {
			t.Fatalf("%d samples out of %d", done, len(samples))
		}
		st := p.Stats()
		if st.SlotsInUse != 0 || st.BatchesEmitted != 3 || st.ChunksDecoded == 0 {
			t.Fatalf("stats: %+v", st)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func equalInt64(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSourceErrors checks that a source that cannot be matched fails the
// batch with an error naming the source and its URI, and that later
// batches still come.
func TestSourceErrors(t *testing.T) {
	rng := newTestRand(t)
	dir := t.TempDir()
	img := imageWithLabel(t, dir, rng.Uint64())
	for _, tc := range []struct {
		src  Source
		kind error
		want string
	}{
		{Source{Name: "label", Label: "nuclei"}, ErrNotFound, "labels/nuclei"},
		{Source{Name: "mask", Path: "labels/cells/0"}, nil, ""},
		{Source{Name: "image", Path: "../.."}, ErrRank, `axis "c"`},
	} {
		uri, box := img, []Range{{Start: 0, Stop: 1}, {Start: 0, Stop: 4}, {Start: 0, Stop: 4}, {Start: 0, Stop: 4}}
		if tc.src.Path == "../.." {
			uri, box = filepath.Join(img, "labels", "cells"), box[1:]
		}
		p, err := New(Config{BatchSize: 1, Device: "cpu", Sources: []Source{{Name: "primary"}, tc.src}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Push(Sample{URI: uri, Box: box}); err != nil {
			t.Fatal(err)
		}
		b, err := p.Pop(context.Background())
		if tc.kind == nil {
			// A plain array with dimension_names matches by name too.
			if err != nil || len(b.Tensor(tc.src.Name).Info().Shape) != 4 {
				t.Errorf("%+v: %v", tc.src, err)
			} else {
				b.Release()
			}
		} else if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.src.Name) {
			t.Errorf("%+v: got %v, want %v naming %q", tc.src, err, tc.kind, tc.want)
		} else {
			t.Log(err)
		}
		p.Close()
	}
	for _, tc := range []struct {
		srcs []Source
		want string
	}{
		{[]Source{{Name: "a"}, {Name: "a"}}, "Config.Sources[1].Name"},
		{[]Source{{Name: "a"}, {Name: ""}}, "Config.Sources[1].Name"},
		{[]Source{{Name: "a"}, {Name: "b", Path: "x", Label: "y"}}, "Config.Sources[1].Label"},
		{[]Source{{Name: "a", Dtype: 99}}, "Config.Sources[0].Dtype"},
	} {
		_, err := New(Config{Device: "cpu", Sources: tc.srcs})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want ErrInvalid naming %s", tc.srcs, err, tc.want)
		}
	}
}

func TestJoinURI(t *testing.T) {
	for _, tc := range []struct{ uri, rel, want string }{
		{"/data/img.zarr", "labels/cells", "/data/img.zarr/labels/cells"},
		{"/data/img.zarr/", "../mask.zarr", "/data/mask.zarr"},
		{"s3://bucket/img.zarr", "labels/cells", "s3://bucket/img.zarr/labels/cells"},
		{"s3://bucket", "labels", "s3://bucket/labels"},
		{"https://host:9000/a/img.zarr?x=1", "labels/c", "https://host:9000/a/img.zarr/labels/c?x=1"},
		{"file:///data/img.zarr", "labels/c", "file:///data/img.zarr/labels/c"},
	} {
		if got := joinURI(tc.uri, tc.rel); got != tc.want {
			t.Errorf("joinURI(%q, %q) = %q, want %q", tc.uri, tc.rel, got, tc.want)
		}
	}
}

// applyBytes applies a transform's documented formula to a C-ordered
// sample of elements of size bytes: y = flip(transpose(x, Perm), Flip).
func applyBytes(x []byte, shape []int, size int, t Transform) []byte {
	a := nd{shape: shape, data: make([]int32, len(x)/size)}
	for i := range a.data {
		a.data[i] = int32(i)
	}
	idx := a.apply(t) // the source element of every output element
	out := make([]byte, len(x))
	for i, j := range idx.data {
		copy(out[i*size:(i+1)*size], x[int(j)*size:(int(j)+1)*size])
	}
	return out
}

// intensityBits is the documented intensity map of float32 bits.
func intensityBits(b uint32, t Transform) uint32 {
	v := math.Float32frombits(b)
	r := float32(float32(v*t.Scale) + t.Offset)
	if r < t.Low {
		r = t.Low
	} else if r > t.High {
		r = t.High
	}
	if r != r {
		return 0x7FC00000
	}
	return math.Float32bits(r)
}

// TestSourcesAugment reads an image (bf16, with intensity) and its label
// (u8, i32, i64) with flips, quarter turns and permutations, and checks
// both against the reference reader's read with the reported transform
// applied by its documented formula; image and label get the same
// geometry.
func TestSourcesAugment(t *testing.T) {
	rng := newTestRand(t)
	img := imageWithLabel(t, t.TempDir(), rng.Uint64())
	ms, _ := zarr.OpenNGFF(img)
	ia, _ := ms.Level(0)
	lms, _ := zarr.OpenNGFF(filepath.Join(img, "labels", "cells"))
	la, _ := lms.Level(0)
	for _, ldt := range []Dtype{U8, I32, I64} {
		aug := &Augment{Seed: rng.Uint64(), Flip: []AxisChance{{1, 0.5}, {3, 0.5}}, Rot90: []PlaneChance{{[2]int{2, 3}, 0.7}},
			Permute: []AxesChance{{[]int{1, 2, 3}, 0.3}}, Scale: [2]float64{0.5, 2}, Offset: [2]float64{-3, 3},
			Mean: 100, Std: 30, Clip: true, ClipLow: -2, ClipHigh: 5}
		p, err := New(Config{BatchSize: 4, Device: "cpu", Augment: aug, Sources: []Source{
			{Name: "image", Dtype: BF16}, {Name: "label", Label: "cells", Dtype: ldt}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			s := Sample{URI: img, Box: randomBox(rng, ia.Shape(), []int{2, 6, 6, 6})}
			if i%2 == 0 {
				s.Seed = rng.Uint64()
			}
			if err := p.Push(s); err != nil {
				t.Fatal(err)
			}
		}
		p.Flush()
		moved := 0
		for b, err := range p.Batches(context.Background(), 2) {
			if err != nil {
				t.Fatal(err)
			}
			it, lt := b.Tensor("image"), b.Tensor("label")
			if lt.Info().Dtype != ldt {
				t.Fatalf("label dtype %v, want %v", lt.Info().Dtype, ldt)
			}
			ib, lb := len(it.Bytes())/b.Len(), len(lt.Bytes())/b.Len()
			for n, s := range b.Samples() {
				xi, xl := it.Transforms()[n], lt.Transforms()[n]
				if !xi.Intensity || xl.Intensity || xl.Scale != 1 || xl.Offset != 0 || !math.IsInf(float64(xl.Low), -1) || !math.IsInf(float64(xl.High), 1) {
					t.Fatalf("intensity on image %+v, label %+v: want the image's only", xi, xl)
				}
				if !slices.Equal(xi.Perm, []int{0, 1, 2, 3}) || slices.Contains(xi.Flip, true) {
					moved++
				}
				reg, err := ia.ReadRegion(s.Box)
				if err != nil {
					t.Fatal(err)
				}
				f32 := applyBytes(expected(reg, F32), []int{2, 6, 6, 6}, 4, xi)
				want := make([]byte, len(f32)/2)
				for e := range len(want) / 2 {
					v := intensityBits(binary.LittleEndian.Uint32(f32[4*e:]), xi)
					binary.LittleEndian.PutUint16(want[2*e:], ptx.BFloat16Bits(v))
				}
				if !bytes.Equal(it.Bytes()[n*ib:(n+1)*ib], want) {
					t.Fatalf("%v: image of sample %s with %+v differs", ldt, s, xi)
				}
				if reg, err = la.ReadRegion(s.Box[1:]); err != nil {
					t.Fatal(err)
				}
				lab := make([]byte, len(reg.Data)*ldt.Size())
				for e, v := range reg.Data {
					switch ldt {
					case U8:
						lab[e] = v
					case I32:
						binary.LittleEndian.PutUint32(lab[4*e:], uint32(v))
					case I64:
						binary.LittleEndian.PutUint64(lab[8*e:], uint64(v))
					}
				}
				if got, want := lt.Bytes()[n*lb:(n+1)*lb], applyBytes(lab, []int{6, 6, 6}, ldt.Size(), xl); !bytes.Equal(got, want) {
					t.Fatalf("%v: label of sample %s with %+v differs", ldt, s, xl)
				}
			}
			b.Release()
		}
		if moved == 0 {
			t.Fatal("no sample was transformed")
		}
		p.Close()
	}
}

// TestSourcesMisfit reads a uint16 image into a u8 output: values above 255
// fail the batch with ErrDtype naming the sample; the next batch, in range,
// comes.
func TestSourcesMisfit(t *testing.T) {
	rng := newTestRand(t)
	img := imageWithLabel(t, t.TempDir(), rng.Uint64())
	p, err := New(Config{BatchSize: 1, Device: "cpu", Sources: []Source{{Name: "image", Dtype: U8}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	whole := Sample{URI: img, Box: []Range{{Start: 0, Stop: 2}, {Start: 0, Stop: 20}, {Start: 0, Stop: 36}, {Start: 0, Stop: 40}}}
	outside := Sample{URI: img, Box: []Range{{Start: 0, Stop: 2}, {Start: 100, Stop: 120}, {Start: 0, Stop: 36}, {Start: 0, Stop: 40}}} // all fill (0)
	if err := p.Push(whole, outside); err != nil {
		t.Fatal(err)
	}
	_, err = p.Pop(context.Background())
	if !errors.Is(err, ErrDtype) || !strings.Contains(err.Error(), "does not fit uint8") || !strings.Contains(err.Error(), whole.String()) {
		t.Fatalf("got %v, want ErrDtype naming the sample and uint8", err)
	}
	t.Log(err)
	b, err := p.Pop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
}

// TestSourcesCheck checks that Check opens every source's array: a
// missing label is reported before Push, naming the source and its URI.
func TestSourcesCheck(t *testing.T) {
	img := imageWithLabel(t, t.TempDir(), newTestRand(t).Uint64())
	box := []Range{{Start: 0, Stop: 1}, {Start: 0, Stop: 4}, {Start: 0, Stop: 4}, {Start: 0, Stop: 4}}
	for _, tc := range []struct {
		label string
		kind  error
	}{{"cells", nil}, {"nuclei", ErrNotFound}} {
		p, err := New(Config{BatchSize: 1, Device: "cpu", Sources: []Source{{Name: "image"}, {Name: "label", Label: tc.label, Dtype: U8}}})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(Sample{URI: img, Box: box})
		if !errors.Is(err, tc.kind) || (err != nil && (!strings.Contains(err.Error(), `source "label"`) || !strings.Contains(err.Error(), "labels/nuclei"))) {
			t.Errorf("label %q: Check gave %v, want %v naming the source and its URI", tc.label, err, tc.kind)
		}
		p.Close()
	}
}

// TestStatsAddEngine checks that every engine counter, metric and memory
// gauge of another source's engine adds up in Pipeline.Stats (a field
// added to Stats must be merged, or listed here as the front's own).
func TestStatsAddEngine(t *testing.T) {
	front := map[string]bool{"Engine": true, "Decoder": true, "PopWaitIO": true, "PopWaitCompute": true, "FlushWait": true,
		"BatchesEmitted": true, "BatchesTruncated": true, "SamplesEmitted": true, "SamplesSkipped": true, "OutputBytes": true,
		"SlotsInUse": true, "SamplesInFlight": true}
	var o Stats
	ov := reflect.ValueOf(&o).Elem()
	for i := range ov.NumField() {
		switch f := ov.Field(i); f.Kind() {
		case reflect.Int64:
			f.SetInt(1)
		case reflect.Struct:
			f.Set(reflect.ValueOf(Metric{Time: 1, Best: 1, InBytes: 1, OutBytes: 1, Count: 1}))
		}
	}
	var s Stats
	s.addEngine(&o)
	sv := reflect.ValueOf(s)
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		if front[name] {
			continue
		}
		if sv.Field(i).IsZero() {
			t.Errorf("Stats.%s is not merged from other sources' engines", name)
		}
	}
}
