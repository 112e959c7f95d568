package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr"
)

type readCase struct {
	Name  string     `json:"name"`
	Array string     `json:"array"` // the zarr array read
	Box   [][2]int64 `json:"box"`
	Dtype string     `json:"dtype"`
	NPY   string     `json:"npy"`

	path  string // what damacy read is given
	level int
}

// readCases lists boxes of the test stores (makeStores), inside the arrays
// and reaching outside them, for every output type.
func readCases(dir string) []readCase {
	type target struct {
		name, path string
		level      int
		boxes      [][][2]int64
	}
	targets := []target{
		{"image0", "image.ome.zarr", 0, [][][2]int64{{{2, 18}, {5, 37}, {0, 36}}, {{-3, 10}, {30, 50}, {-5, 7}}}},
		{"image1", "image.ome.zarr", 1, [][][2]int64{{{0, 10}, {0, 20}, {0, 18}}, {{4, 12}, {-2, 6}, {15, 25}}}},
		{"plain", "plain.zarr", 0, [][][2]int64{{{0, 30}, {0, 50}}, {{-2, 10}, {40, 60}}}},
		{"v2", "v2.zarr", 0, [][][2]int64{{{0, 17}, {0, 23}}, {{3, 20}, {-4, 9}}}},
	}
	var cases []readCase
	for _, tg := range targets {
		arr := filepath.Join(dir, tg.path)
		if strings.HasPrefix(tg.path, "image") {
			arr = filepath.Join(arr, fmt.Sprint(tg.level))
		}
		for bi, box := range tg.boxes {
			for _, dt := range []string{"native", "f32", "bf16"} {
				name := fmt.Sprintf("%s-box%d-%s", tg.name, bi, dt)
				cases = append(cases, readCase{
					Name: name, Array: arr, Box: box, Dtype: dt, NPY: filepath.Join(dir, name+".npy"),
					path: filepath.Join(dir, tg.path), level: tg.level,
				})
			}
		}
	}
	return cases
}

func (c *readCase) args() []string {
	box := make([]string, len(c.Box))
	for i, r := range c.Box {
		box[i] = fmt.Sprintf("%d:%d", r[0], r[1])
	}
	args := []string{"read", c.path, "--box", strings.Join(box, ","), "--dtype", c.Dtype, "-o", c.NPY}
	if c.level != 0 {
		args = append(args, "--level", fmt.Sprint(c.level))
	}
	if c.Dtype != "native" {
		args = append(args, "--engine", "host")
	}
	return args
}

// TestReadZarrPython reads boxes with damacy read and checks the .npy
// files with numpy against zarr-python.
func TestReadZarrPython(t *testing.T) {
	py := mustHavePython(t)
	dir := t.TempDir()
	makeStores(t, dir)
	cases := readCases(dir)
	for i := range cases {
		mustRun(t, cases[i].args()...)
	}
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, filepath.Join("testdata", "readcheck.py"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("readcheck.py: %v\n%s", err, out)
	}
	b, err = os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var results []struct {
		Name string `json:"name"`
		OK   bool   `json:"ok"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal(b, &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != len(cases) {
		t.Fatalf("readcheck.py checked %d of %d cases", len(results), len(cases))
	}
	for _, r := range results {
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Msg)
		}
	}
}

// TestReadNative checks damacy read's native output against package
// zarr's reference reader and the .npy layout, without Python.
func TestReadNative(t *testing.T) {
	dir := t.TempDir()
	makeStores(t, dir)
	for _, c := range readCases(dir) {
		if c.Dtype != "native" {
			continue
		}
		mustRun(t, c.args()...)
		descr, shape, data := parseNPY(t, c.NPY)
		a, err := zarr.Open(c.Array)
		if err != nil {
			t.Fatal(err)
		}
		box := make([]zarr.Range, len(c.Box))
		for i, r := range c.Box {
			box[i] = zarr.Range{Start: r[0], Stop: r[1]}
		}
		reg, err := a.ReadRegion(box)
		if err != nil {
			t.Fatal(err)
		}
		wantDescr, _ := npyDescr(reg.DataType)
		if descr != wantDescr || fmt.Sprint(shape) != fmt.Sprint(reg.Shape) || !bytes.Equal(data, reg.Data) {
			t.Errorf("%s: npy %s %v (%d bytes); want %s %v (%d bytes), equal data", c.Name, descr, shape, len(data), wantDescr, reg.Shape, len(reg.Data))
		}
	}
}

// parseNPY reads a version 1.0 .npy file written by writeNPY, checking
// its header's layout.
func parseNPY(t *testing.T, path string) (descr string, shape []int64, data []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10 || string(b[:8]) != "\x93NUMPY\x01\x00" {
		t.Fatalf("%s: not a .npy 1.0 file", path)
	}
	n := int(binary.LittleEndian.Uint16(b[8:]))
	if (10+n)%64 != 0 || b[10+n-1] != '\n' {
		t.Errorf("%s: header of %d bytes is not padded to 64 with a final newline", path, n)
	}
	h := string(b[10 : 10+n])
	var tuple string
	if _, err := fmt.Sscanf(h, "{'descr': '%3s', 'fortran_order': False, 'shape': (%s", &descr, &tuple); err != nil {
		t.Fatalf("%s: header %q: %v", path, h, err)
	}
	inner := h[strings.Index(h, "(")+1 : strings.Index(h, ")")]
	for f := range strings.SplitSeq(inner, ",") {
		if f = strings.TrimSpace(f); f != "" {
			var v int64
			fmt.Sscan(f, &v)
			shape = append(shape, v)
		}
	}
	return descr, shape, b[10+n:]
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	makeStores(t, dir)
	out := filepath.Join(dir, "x.npy")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"read", filepath.Join(dir, "plain.zarr"), "--box", "0:4", "-o", out}, "--box has 1 ranges; "},
		{[]string{"read", filepath.Join(dir, "plain.zarr"), "--box", "0:4,0:4", "--level", "1", "-o", out}, "--level 1 does not apply"},
		{[]string{"read", filepath.Join(dir, "image.ome.zarr"), "--box", "0:4,0:4,0:4", "--level", "2", "-o", out}, "has 2 levels: --level 2 does not exist"},
		{[]string{"read", filepath.Join(dir, "nosuch"), "--box", "0:4", "-o", out}, "nosuch"},
		{[]string{"read", filepath.Join(dir, "plain.zarr"), "--box", "0:4,0:4", "-o", filepath.Join(dir, "no", "dir.npy")}, "dir.npy"},
	} {
		code, stdout, errs := runCmd(t, tt.args...)
		if code != exitError || stdout != "" || !strings.Contains(errs, tt.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("damacy %s = exit %d, stderr %q; want exit 1, one line containing %q", strings.Join(tt.args, " "), code, errs, tt.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed read left %s", out)
	}
}
