package zarr

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

const ngffAxes = `[{"name":"c","type":"channel"},{"name":"y","type":"space","unit":"micrometer"},{"name":"x","type":"space","unit":"micrometer"}]`

const ngffDatasets = `[
	{"path":"s0","coordinateTransformations":[{"type":"scale","scale":[1,0.5,0.5]},{"type":"translation","translation":[0,10,20]}]},
	{"path":"s1","coordinateTransformations":[{"type":"scale","scale":[1,1,1]}]}]`

// ngffStore writes a two-level image: OME-NGFF 0.5 over zarr v3 or 0.4
// over zarr v2, with a multiscale-level scale of 2 along x.
func ngffStore(t *testing.T, v05 bool, multiscales string) (fstest.MapFS, [][]byte) {
	t.Helper()
	fsys := fstest.MapFS{}
	rng := rand.New(rand.NewPCG(12, uint64(testSeed(t))))
	var levels [][]byte
	for i, shape := range [][]int64{{2, 30, 40}, {2, 15, 20}} {
		data := randArray(rng, Uint16, prod(shape))
		levels = append(levels, data)
		path := "img/s" + string(rune('0'+i))
		if v05 {
			a := tarray{shape: shape, chunk: []int64{1, 8, 8}, dt: Uint16, chain: &tchain{bb: []tcodec{zstdCodecT(false, false, false)}}}
			a.write(t, fsys, path, data)
			m := fsys[path+"/zarr.json"]
			m.Data = []byte(strings.Replace(string(m.Data), `"codecs"`, `"dimension_names":["c","y","x"],"codecs"`, 1))
		} else {
			a := tarray{shape: shape, chunk: []int64{1, 8, 8}, dt: Uint16, chain: &tchain{perm: []int{2, 1, 0}, bb: []tcodec{zstdCodecT(false, false, false)}}}
			writeV2(t, fsys, path, &a, &v2Layout{typestr: "<u2", order: "F", sep: "/", compressor: `{"id":"zstd","level":1}`, fill: "0"}, data)
		}
	}
	if v05 {
		fsys["img/zarr.json"] = &fstest.MapFile{Data: []byte(`{"zarr_format":3,"node_type":"group","attributes":{"ome":{"version":"0.5","multiscales":` + multiscales + `}}}`)}
	} else {
		fsys["img/.zgroup"] = &fstest.MapFile{Data: []byte(`{"zarr_format":2}`)}
		fsys["img/.zattrs"] = &fstest.MapFile{Data: []byte(`{"multiscales":` + multiscales + `}`)}
	}
	return fsys, levels
}

func multiscalesJSON(version, axes, datasets string) string {
	v := ""
	if version != "" {
		v = `"version":"` + version + `",`
	}
	return `[{` + v + `"name":"img","axes":` + axes + `,"datasets":` + datasets +
		`,"coordinateTransformations":[{"type":"scale","scale":[1,1,2]}]}]`
}

func TestNGFF(t *testing.T) {
	for _, v05 := range []bool{false, true} {
		version := "0.4"
		if v05 {
			version = "0.5"
		}
		t.Run(version, func(t *testing.T) {
			ms := multiscalesJSON(version, ngffAxes, ngffDatasets)
			if v05 {
				ms = multiscalesJSON("", ngffAxes, ngffDatasets)
			}
			fsys, levels := ngffStore(t, v05, ms)
			s := NewFSStore(fsys)
			if k, err := InspectStore(s, "img"); k != NodeMultiscale || err != nil {
				t.Errorf("InspectStore(img) = %v, %v; want multiscale", k, err)
			}
			if k, err := InspectStore(s, "img/s1"); k != NodeArray || err != nil {
				t.Errorf("InspectStore(img/s1) = %v, %v; want array", k, err)
			}
			m, err := OpenNGFFStore(s, "img")
			if err != nil {
				t.Fatal(err)
			}
			if m.Version() != version || m.Name() != "img" || m.Path() != "img" {
				t.Errorf("Version, Name, Path = %q, %q, %q", m.Version(), m.Name(), m.Path())
			}
			axes := m.Axes()
			if len(axes) != 3 || axes[1] != (Axis{"y", "space", "micrometer"}) || axes[0] != (Axis{"c", "channel", ""}) {
				t.Errorf("Axes() = %+v", axes)
			}
			ls := m.Levels()
			want := []Level{
				{"s0", []float64{1, 0.5, 1}, []float64{0, 10, 40}},
				{"s1", []float64{1, 1, 2}, []float64{0, 0, 0}},
			}
			for i := range want {
				if ls[i].Path != want[i].Path || !slices.Equal(ls[i].Scale, want[i].Scale) || !slices.Equal(ls[i].Translation, want[i].Translation) {
					t.Errorf("level %d = %+v, want %+v", i, ls[i], want[i])
				}
			}
			for k := range ls {
				a, err := m.Level(k)
				if err != nil {
					t.Fatal(err)
				}
				checkRegion(t, a, levels[k], boxOf(a.Shape(), 1, 2), nil)
			}
			if _, err := m.Level(2); err == nil {
				t.Error("Level(2) of a two-level image succeeded")
			}
			if _, err := OpenNGFFStore(s, "img/s0"); !errors.Is(err, ErrNotFound) {
				t.Errorf("OpenNGFFStore(an array) = %v; want ErrNotFound", err)
			}
		})
	}
}

func TestNGFFErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		v05  bool
		ms   string
		err  error
	}{
		{"version 0.3", false, multiscalesJSON("0.3", ngffAxes, ngffDatasets), ErrUnsupported},
		{"no version", false, multiscalesJSON("", ngffAxes, ngffDatasets), ErrUnsupported},
		{"empty", true, `[]`, ErrFormat},
		{"string axes", false, multiscalesJSON("0.4", `["c","y","x"]`, ngffDatasets), ErrFormat},
		{"one axis", false, multiscalesJSON("0.4", `[{"name":"x"}]`, ngffDatasets), ErrFormat},
		{"duplicate axis", true, multiscalesJSON("", `[{"name":"c"},{"name":"x"},{"name":"x"}]`, ngffDatasets), ErrFormat},
		{"unnamed axis", true, multiscalesJSON("", `[{"name":"c"},{"type":"space"},{"name":"x"}]`, ngffDatasets), ErrFormat},
		{"no datasets", true, multiscalesJSON("", ngffAxes, `[]`), ErrFormat},
		{"no scale", true, multiscalesJSON("", ngffAxes, `[{"path":"s0"}]`), ErrFormat},
		{"translation first", true, multiscalesJSON("", ngffAxes, `[{"path":"s0","coordinateTransformations":[{"type":"translation","translation":[0,0,0]},{"type":"scale","scale":[1,1,1]}]}]`), ErrFormat},
		{"scale length", true, multiscalesJSON("", ngffAxes, `[{"path":"s0","coordinateTransformations":[{"type":"scale","scale":[1,1]}]}]`), ErrFormat},
		{"scale in a file", true, multiscalesJSON("", ngffAxes, `[{"path":"s0","coordinateTransformations":[{"type":"scale","path":"scale.bin"}]}]`), ErrUnsupported},
		{"escaping path", true, multiscalesJSON("", ngffAxes, `[{"path":"../s0","coordinateTransformations":[{"type":"scale","scale":[1,1,1]}]}]`), ErrFormat},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fsys, _ := ngffStore(t, tt.v05, tt.ms)
			m, err := OpenNGFFStore(NewFSStore(fsys), "img")
			var me *MetadataError
			if m != nil || !errors.Is(err, tt.err) || !errors.As(err, &me) {
				t.Fatalf("OpenNGFFStore = %v, %v; want a *MetadataError wrapping %v", m, err, tt.err)
			}
		})
	}
	t.Run("ome version", func(t *testing.T) {
		fsys, _ := ngffStore(t, true, multiscalesJSON("", ngffAxes, ngffDatasets))
		fsys["img/zarr.json"].Data = []byte(strings.Replace(string(fsys["img/zarr.json"].Data), `"0.5"`, `"0.6"`, 1))
		if _, err := OpenNGFFStore(NewFSStore(fsys), "img"); !errors.Is(err, ErrUnsupported) {
			t.Errorf("OpenNGFFStore(0.6) = %v; want ErrUnsupported", err)
		}
	})
	t.Run("dimension names", func(t *testing.T) {
		fsys, _ := ngffStore(t, true, multiscalesJSON("", ngffAxes, ngffDatasets))
		f := fsys["img/s1/zarr.json"]
		f.Data = []byte(strings.Replace(string(f.Data), `["c","y","x"]`, `["c","x","y"]`, 1))
		m, err := OpenNGFFStore(NewFSStore(fsys), "img")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Level(0); err != nil {
			t.Errorf("Level(0) = %v", err)
		}
		if _, err := m.Level(1); !errors.Is(err, ErrFormat) {
			t.Errorf("Level(1) with swapped dimension_names = %v; want ErrFormat", err)
		}
	})
	t.Run("rank", func(t *testing.T) {
		fsys, _ := ngffStore(t, false, multiscalesJSON("0.4", `[{"name":"t"},{"name":"c"},{"name":"y"},{"name":"x"}]`,
			`[{"path":"s0","coordinateTransformations":[{"type":"scale","scale":[1,1,1,1]}]}]`))
		fsys["img/.zattrs"].Data = []byte(strings.Replace(string(fsys["img/.zattrs"].Data), `[1,1,2]`, `[1,1,1,2]`, 1))
		m, err := OpenNGFFStore(NewFSStore(fsys), "img")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Level(0); !errors.Is(err, ErrFormat) {
			t.Errorf("Level(0) of a 3-d array under 4 axes = %v; want ErrFormat", err)
		}
	})
}

// TestNGFFDir opens an image from a directory, inside a bioformats2raw
// container, and inspects plain groups.
func TestNGFFDir(t *testing.T) {
	fsys, levels := ngffStore(t, false, multiscalesJSON("0.4", ngffAxes, ngffDatasets))
	root := t.TempDir()
	for name, f := range fsys {
		p := filepath.Join(root, "0", strings.TrimPrefix(name, "img/"))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, ".zgroup"), []byte(`{"zarr_format":2}`), 0o644)
	os.WriteFile(filepath.Join(root, ".zattrs"), []byte(`{"bioformats2raw.layout":3}`), 0o644)
	if k, err := Inspect(root); k != NodeGroup || err != nil {
		t.Errorf("Inspect(container) = %v, %v; want group", k, err)
	}
	if k, err := Inspect(filepath.Join(root, "0")); k != NodeMultiscale || err != nil {
		t.Errorf("Inspect(image) = %v, %v; want multiscale", k, err)
	}
	if k, err := Inspect(filepath.Join(root, "0", "s1")); k != NodeArray || err != nil {
		t.Errorf("Inspect(level) = %v, %v; want array", k, err)
	}
	if _, err := Inspect(filepath.Join(root, "nope")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inspect(missing) = %v; want ErrNotFound", err)
	}
	m, err := OpenNGFF(root)
	if err != nil {
		t.Fatal(err)
	}
	if m.Path() != "0" {
		t.Errorf("bioformats2raw image path %q, want \"0\"", m.Path())
	}
	a, err := m.Level(0)
	if err != nil {
		t.Fatal(err)
	}
	checkRegion(t, a, levels[0], boxOf(a.Shape(), 0, 0), nil)
	os.WriteFile(filepath.Join(root, ".zattrs"), []byte(`{}`), 0o644)
	if _, err := OpenNGFF(root); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenNGFF(plain group) = %v; want ErrNotFound", err)
	}
	a, err = Open(filepath.Join(root, "0", "s1"))
	if err != nil || a.ZarrFormat() != 2 {
		t.Fatalf("Open(level) = %v, %v", a, err)
	}
}
