package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// testdataDir holds the stores that zarr-python and tensorstore wrote, and
// their expected values.
var testdataDir = filepath.Join("..", "..", "testdata")

// testdataRead are the arrays of ../../testdata that TestReadTestdata
// reads: NGFF image and label levels of both versions, and arrays of
// either writer with order F and big-endian data, nested sharding,
// missing shards, a hex NaN fill and four axes.
var testdataRead = []string{
	"ngff/v05/image/1", "ngff/v04/image/0", "ngff/v04/labels/cells/2", "ngff/v05/labels/nuclei/0",
	"zarr-python/v2-order-F-big-blosclz", "zarr-python/v3-shard-nested", "zarr-python/v3-fill-hex-nan",
	"zarr-python/v3-4d", "tensorstore/v3-shard-zstd", "tensorstore/v2-gzip-slash-nan",
}

func testdataEntries(t *testing.T) map[string]zarrtest.TestdataArray {
	t.Helper()
	m := map[string]zarrtest.TestdataArray{}
	for _, e := range zarrtest.ReadTestdata(t, testdataDir) {
		m[e.Name] = e
	}
	return m
}

// TestReadTestdata runs damacy read on stores of ../../testdata: native
// output on the whole array, boxes reaching past either end and one wholly
// outside, equal to the expected .npy values (fill outside); and --dtype
// f32 on the host engine for the integer NGFF levels, equal to the values
// converted to float32.
func TestReadTestdata(t *testing.T) {
	entries := testdataEntries(t)
	dir := t.TempDir()
	for _, name := range testdataRead {
		e, ok := entries[name]
		if !ok {
			t.Fatalf("%s is not in the manifest", name)
		}
		want, err := zarrtest.ReadNPY(filepath.Join(testdataDir, e.NPY))
		if err != nil {
			t.Fatal(err)
		}
		for i, box := range zarrtest.TestdataBoxes(want.Shape) {
			dtypes := []string{"native"}
			if e.NGFFLevel != nil && i == 3 {
				dtypes = append(dtypes, "f32")
			}
			for _, dt := range dtypes {
				out := filepath.Join(dir, fmt.Sprintf("%s-%d-%s.npy", strings.ReplaceAll(name, "/", "_"), i, dt))
				args := []string{"read", filepath.Join(testdataDir, e.Path), "--box", testdataBoxFlag(box), "--dtype", dt, "-o", out}
				if e.NGFFLevel != nil && *e.NGFFLevel != 0 {
					args = append(args, "--level", fmt.Sprint(*e.NGFFLevel))
				}
				if dt != "native" {
					args = append(args, "--engine", "host")
				}
				mustRun(t, args...)
				got, err := zarrtest.ReadNPY(out)
				if err != nil {
					t.Fatal(err)
				}
				exp, expType := want.Box(e.Fill(), box), e.DType
				if dt == "f32" {
					exp, expType = testdataFloat32(t, e.DType, exp), "float32"
				}
				var extents []int64
				for _, r := range box {
					extents = append(extents, r[1]-r[0])
				}
				if got.DType != expType || !slices.Equal(got.Shape, extents) || !bytes.Equal(got.Data, exp) {
					t.Errorf("damacy %s: %s %v; want %s %v, and the expected values (%s; %s)", strings.Join(args, " "),
						got.DType, got.Shape, expType, extents, e.Exercises, e.Writer)
				}
			}
		}
	}
}

func testdataBoxFlag(box [][2]int64) string {
	parts := make([]string, len(box))
	for i, r := range box {
		parts[i] = fmt.Sprintf("%d:%d", r[0], r[1])
	}
	return strings.Join(parts, ",")
}

// testdataFloat32 converts little-endian unsigned integers of the data
// type name to float32 (rounded to nearest even where they do not fit).
func testdataFloat32(t *testing.T, dtype string, data []byte) []byte {
	t.Helper()
	var vals []uint64
	switch dtype {
	case "uint8":
		for _, v := range data {
			vals = append(vals, uint64(v))
		}
	case "uint16":
		for i := 0; i < len(data); i += 2 {
			vals = append(vals, uint64(binary.LittleEndian.Uint16(data[i:])))
		}
	case "uint32":
		for i := 0; i < len(data); i += 4 {
			vals = append(vals, uint64(binary.LittleEndian.Uint32(data[i:])))
		}
	default:
		t.Fatalf("no float32 conversion of %s here", dtype)
	}
	out := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(v)))
	}
	return out
}

// TestInspectTestdata runs damacy inspect --json on every OME-NGFF image
// of ../../testdata (the images and their labels, 0.4 and 0.5) and checks
// the version, axes and each level's shape and data type against the
// manifest.
func TestInspectTestdata(t *testing.T) {
	type level struct {
		shape []int64
		dtype string
	}
	groups := map[string][]level{}
	axes := map[string][]string{}
	for _, e := range zarrtest.ReadTestdata(t, testdataDir) {
		if e.NGFFLevel == nil {
			continue
		}
		lv := groups[e.Path]
		for len(lv) <= *e.NGFFLevel {
			lv = append(lv, level{})
		}
		lv[*e.NGFFLevel] = level{e.Shape, e.DType}
		groups[e.Path], axes[e.Path] = lv, e.Axes
	}
	if len(groups) != 6 {
		t.Fatalf("%d NGFF images in the manifest, want 6 (image, cells and nuclei, twice)", len(groups))
	}
	for path, levels := range groups {
		out, _ := mustRun(t, "inspect", "--json", filepath.Join(testdataDir, path))
		var got struct {
			Node string `json:"node"`
			NGFF struct {
				Version string `json:"version"`
				Axes    []struct {
					Name string `json:"name"`
				} `json:"axes"`
				Levels []struct {
					Array struct {
						Shape    []int64 `json:"shape"`
						DataType string  `json:"data_type"`
					} `json:"array"`
				} `json:"levels"`
			} `json:"ngff"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("inspect --json %s: %v\n%s", path, err, out)
		}
		version := "0.5"
		if strings.Contains(path, "_v04") {
			version = "0.4"
		}
		var names []string
		for _, a := range got.NGFF.Axes {
			names = append(names, a.Name)
		}
		if got.Node != "multiscale" || got.NGFF.Version != version || !slices.Equal(names, axes[path]) || len(got.NGFF.Levels) != len(levels) {
			t.Errorf("inspect %s: %s, version %s, axes %q, %d levels; want multiscale, %s, %q, %d", path, got.Node,
				got.NGFF.Version, names, len(got.NGFF.Levels), version, axes[path], len(levels))
			continue
		}
		for k, lv := range got.NGFF.Levels {
			if !slices.Equal(lv.Array.Shape, levels[k].shape) || lv.Array.DataType != levels[k].dtype {
				t.Errorf("inspect %s level %d: %s %v, want %s %v", path, k, lv.Array.DataType, lv.Array.Shape, levels[k].dtype, levels[k].shape)
			}
		}
	}
}
