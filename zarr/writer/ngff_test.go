package writer

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/google/go-cmp/cmp"
)

func ngffTestSpec(dt zarr.DataType, method Downsampling) NGFFSpec {
	return NGFFSpec{
		Name: "img",
		Axes: []Axis{
			{Name: "c", Type: "channel"},
			{Name: "z", Type: "space", Unit: "micrometer"},
			{Name: "y", Type: "space", Unit: "micrometer"},
			{Name: "x", Type: "space", Unit: "micrometer"},
		},
		Levels:       3,
		Scale:        []float64{1, 2, 0.5, 0.5},
		Translation:  []float64{0, 10, 0, -1},
		Downsampling: method,
		Array: Spec{
			Shape: []int64{2, 9, 13, 6}, ChunkShape: []int64{1, 4, 4, 3}, ShardShape: []int64{1, 8, 8, 6},
			DataType: dt, Compression: Compression{Codec: Zstd, Level: 1},
		},
	}
}

// TestNGFF writes multiscale images, downsamples them, and checks what
// package zarr reads back: the levels' scales and translations, and each
// level's data against a reference downsampling of the level above.
func TestNGFF(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 2))
	for _, dt := range allTypes {
		for _, method := range []Downsampling{Mean, Nearest} {
			t.Run(fmt.Sprintf("%v/%v", dt, method), func(t *testing.T) {
				spec := ngffTestSpec(dt, method)
				dir := filepath.Join(t.TempDir(), "img.zarr")
				m, err := CreateNGFF(dir, spec)
				if err != nil {
					t.Fatal(err)
				}
				level0 := ngffData(rng, dt, spec.Array.Shape)
				if err := m.Level(0).WriteRegion(fullBox(spec.Array.Shape), level0); err != nil {
					t.Fatal(err)
				}
				if err := m.Downsample(context.Background(), 3); err != nil {
					t.Fatal(err)
				}
				checkNGFF(t, dir, spec)
			})
		}
	}
}

// ngffData is random level-0 data: integers over the whole range (so that
// sums overflow), floats small integers (so that every mean is exact in
// every float type and the summation order does not matter).
func ngffData(rng *rand.Rand, dt zarr.DataType, shape []int64) []byte {
	ti, _ := infoOf(dt)
	n := int(product(shape))
	data := make([]byte, n*ti.size)
	for i := range n {
		var v uint64
		switch ti.kind {
		case kindBool:
			v = rng.Uint64() & 1
		case kindFloat:
			v = ti.fromFloat64(float64(rng.IntN(401) - 200))
		default:
			v = rng.Uint64() & ti.mask()
		}
		store(data[i*ti.size:], ti.size, v)
	}
	return data
}

func checkNGFF(t *testing.T, dir string, spec NGFFSpec) {
	t.Helper()
	ms, err := zarr.OpenNGFF(dir)
	if err != nil {
		t.Fatalf("zarr.OpenNGFF: %v", err)
	}
	if ms.Version() != "0.5" || ms.Name() != spec.Name {
		t.Errorf("version %q, name %q; want 0.5, %q", ms.Version(), ms.Name(), spec.Name)
	}
	var axes []Axis
	var names []string
	for _, ax := range ms.Axes() {
		axes = append(axes, Axis(ax))
		names = append(names, ax.Name)
	}
	if diff := cmp.Diff(spec.Axes, axes); diff != "" {
		t.Errorf("axes differ (-want +got):\n%s", diff)
	}
	levels := ms.Levels()
	if len(levels) != spec.Levels {
		t.Fatalf("%d levels; want %d", len(levels), spec.Levels)
	}
	ti, _ := infoOf(spec.Array.DataType)
	var above []byte
	var aboveShape []int64
	for k, lv := range levels {
		f := float64(int(1) << k)
		wantScale := []float64{spec.Scale[0], spec.Scale[1] * f, spec.Scale[2] * f, spec.Scale[3] * f}
		wantTrans := slices.Clone(spec.Translation)
		if spec.Downsampling == Mean {
			for d := 1; d < 4; d++ {
				wantTrans[d] += (f - 1) / 2 * spec.Scale[d]
			}
		}
		if lv.Path != fmt.Sprint(k) || !slices.Equal(lv.Scale, wantScale) || !slices.Equal(lv.Translation, wantTrans) {
			t.Errorf("level %d: path %q scale %v translation %v; want %q, %v, %v", k, lv.Path, lv.Scale, lv.Translation, fmt.Sprint(k), wantScale, wantTrans)
		}
		a, err := ms.Level(k)
		if err != nil {
			t.Fatalf("level %d: %v", k, err)
		}
		if !slices.Equal(a.DimensionNames(), names) {
			t.Errorf("level %d: dimension names %q; want %q", k, a.DimensionNames(), names)
		}
		shape := a.Shape()
		reg, err := a.ReadRegion(fullBox(shape))
		if err != nil {
			t.Fatalf("level %d: ReadRegion: %v", k, err)
		}
		if k > 0 {
			wantShape := []int64{aboveShape[0], (aboveShape[1] + 1) / 2, (aboveShape[2] + 1) / 2, (aboveShape[3] + 1) / 2}
			if !slices.Equal(shape, wantShape) {
				t.Fatalf("level %d: shape %v; want %v", k, shape, wantShape)
			}
			want := refDownsample(ti, spec.Downsampling, above, aboveShape, shape)
			if i := firstDiff(reg.Data, want, ti.size); i >= 0 {
				t.Fatalf("level %d: element %d is %#x; want %#x", k, i, load(reg.Data[i*ti.size:], ti.size), load(want[i*ti.size:], ti.size))
			}
		}
		above, aboveShape = reg.Data, shape
	}
}

// refDownsample is a direct reference for 2x downsampling of axes 1..3 of a
// 4-D array (axis 0 kept): exact integer means with big.Int.
func refDownsample(ti typeInfo, method Downsampling, src []byte, srcShape, shape []int64) []byte {
	out := make([]byte, int(product(shape))*ti.size)
	at := func(c, z, y, x int64) uint64 {
		i := ((c*srcShape[1]+z)*srcShape[2]+y)*srcShape[3] + x
		return load(src[i*int64(ti.size):], ti.size)
	}
	o := 0
	for c := range shape[0] {
		for z := range shape[1] {
			for y := range shape[2] {
				for x := range shape[3] {
					var v uint64
					if method == Nearest {
						v = at(c, 2*z, 2*y, 2*x)
					} else {
						sum, fsum, n := new(big.Int), 0.0, int64(0)
						for dz := range int64(2) {
							for dy := range int64(2) {
								for dx := range int64(2) {
									if 2*z+dz >= srcShape[1] || 2*y+dy >= srcShape[2] || 2*x+dx >= srcShape[3] {
										continue
									}
									e := at(c, 2*z+dz, 2*y+dy, 2*x+dx)
									n++
									switch ti.kind {
									case kindFloat:
										fsum += ti.toFloat64(e)
									case kindInt:
										sum.Add(sum, big.NewInt(ti.signExtend(e)))
									default:
										sum.Add(sum, new(big.Int).SetUint64(e))
									}
								}
							}
						}
						if ti.kind == kindFloat {
							v = ti.fromFloat64(fsum / float64(n))
						} else {
							// floor((sum + n/2) / n); Div rounds toward -inf for n > 0.
							sum.Add(sum, big.NewInt(n/2))
							sum.Div(sum, big.NewInt(n))
							v = uint64(sum.Int64()) & ti.mask()
							if ti.kind != kindInt {
								v = sum.Uint64()
							}
						}
					}
					store(out[o:], ti.size, v)
					o += ti.size
				}
			}
		}
	}
	return out
}

// firstDiff returns the index of the first element that differs, or -1.
func firstDiff(a, b []byte, size int) int {
	for i := 0; i < len(a) && i < len(b); i += size {
		if string(a[i:i+size]) != string(b[i:i+size]) {
			return i / size
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b)) / size
	}
	return -1
}

var badNGFFTests = []struct {
	name  string
	edit  func(s *NGFFSpec)
	field string
}{
	{"one axis", func(s *NGFFSpec) { s.Axes = s.Axes[:1] }, "NGFFSpec.Axes"},
	{"axes vs shape", func(s *NGFFSpec) { s.Axes = s.Axes[1:] }, "NGFFSpec.Axes"},
	{"empty name", func(s *NGFFSpec) { s.Axes[2].Name = "" }, "NGFFSpec.Axes[2].Name"},
	{"repeated name", func(s *NGFFSpec) { s.Axes[3].Name = "z" }, "NGFFSpec.Axes[3].Name"},
	{"one space axis", func(s *NGFFSpec) { s.Axes[1].Type, s.Axes[2].Type = "time", "" }, "NGFFSpec.Axes"},
	{"levels", func(s *NGFFSpec) { s.Levels = 33 }, "NGFFSpec.Levels"},
	{"scale count", func(s *NGFFSpec) { s.Scale = []float64{1, 2} }, "NGFFSpec.Scale"},
	{"scale zero", func(s *NGFFSpec) { s.Scale[2] = 0 }, "NGFFSpec.Scale"},
	{"translation count", func(s *NGFFSpec) { s.Translation = []float64{1} }, "NGFFSpec.Translation"},
	{"method", func(s *NGFFSpec) { s.Downsampling = 5 }, "NGFFSpec.Downsampling"},
	{"format", func(s *NGFFSpec) { s.Array.Format = 2 }, "NGFFSpec.Array.Format"},
	{"dimension names", func(s *NGFFSpec) { s.Array.DimensionNames = []string{"a", "b", "c", "d"} }, "NGFFSpec.Array.DimensionNames"},
	{"array", func(s *NGFFSpec) { s.Array.ChunkShape = []int64{1} }, "NGFFSpec.Array.ChunkShape"},
}

func TestBadNGFF(t *testing.T) {
	for _, tt := range badNGFFTests {
		s := ngffTestSpec(zarr.Uint16, Mean)
		tt.edit(&s)
		m, err := CreateNGFF(filepath.Join(t.TempDir(), "g"), s)
		var se *SpecError
		if m != nil || !errors.As(err, &se) || se.Field != tt.field || !strings.HasPrefix(err.Error(), "writer: "+tt.field+": ") {
			t.Errorf("%s: CreateNGFF = %v, %v; want nil, a *SpecError for %s", tt.name, m, err, tt.field)
		}
	}
}
