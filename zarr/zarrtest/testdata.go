package zarrtest

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestdataArray is one entry of the manifest of the module's testdata
// directory (or of one that testdata/gen/make.py writes elsewhere): an
// array, or one level of an OME-NGFF image, and its expected values.
// testdata/README.md describes the fields.
type TestdataArray struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`       // the array, or the NGFF image group, relative to the directory
	NGFFLevel *int     `json:"ngff_level"` // the level, for NGFF images
	NPY       string   `json:"npy"`        // the expected values, relative to the directory
	DType     string   `json:"dtype"`      // zarr v3 data type name
	Shape     []int64  `json:"shape"`
	FillLEHex string   `json:"fill_le_hex"` // the fill value's little-endian bytes
	Writer    string   `json:"writer"`
	Exercises string   `json:"exercises"`
	Axes      []string `json:"axes"`  // NGFF axis names
	Error     string   `json:"error"` // set when opening must fail with this text
}

// Fill returns the fill value's little-endian bytes.
func (e TestdataArray) Fill() []byte {
	b, err := hex.DecodeString(e.FillLEHex)
	if err != nil {
		panic(fmt.Sprintf("%s: fill_le_hex %q: %v", e.Name, e.FillLEHex, err))
	}
	return b
}

// ReadTestdata returns the manifest of dir (its manifest.json), failing
// the test when it cannot.
func ReadTestdata(t testing.TB, dir string) []TestdataArray {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m []TestdataArray
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", filepath.Join(dir, "manifest.json"), err)
	}
	return m
}

// NPY is the content of a .npy file of a little-endian (or single-byte)
// C-order array.
type NPY struct {
	DType string // zarr v3 data type name
	Shape []int64
	Data  []byte
}

var (
	npyDescr = regexp.MustCompile(`'descr':\s*'([<|])([biuf])(\d+)'`)
	npyOrder = regexp.MustCompile(`'fortran_order':\s*False`)
	npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// ReadNPY reads a .npy file (format 1.0 to 3.0) of a little-endian
// C-order array of a zarr data type.
func ReadNPY(path string) (*NPY, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("%s: not a .npy file", path)
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, fmt.Errorf("%s: truncated header", path)
		}
		hlen, start = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, fmt.Errorf("%s: .npy version %d", path, b[6])
	}
	if start+hlen > len(b) {
		return nil, fmt.Errorf("%s: truncated header", path)
	}
	header := string(b[start : start+hlen])
	d := npyDescr.FindStringSubmatch(header)
	s := npyShape.FindStringSubmatch(header)
	if d == nil || s == nil || !npyOrder.MatchString(header) {
		return nil, fmt.Errorf("%s: header %q is not a little-endian C-order array", path, header)
	}
	size, _ := strconv.Atoi(d[3])
	dtype := map[string]string{"b": "bool", "i": "int", "u": "uint", "f": "float"}[d[2]]
	if dtype != "bool" {
		dtype += strconv.Itoa(8 * size)
	}
	a := &NPY{DType: dtype, Data: b[start+hlen:]}
	n := int64(size)
	for f := range strings.SplitSeq(s[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: shape %q: %v", path, s[1], err)
		}
		a.Shape = append(a.Shape, v)
		n *= v
	}
	if int64(len(a.Data)) != n {
		return nil, fmt.Errorf("%s: %d data bytes for shape %v of %s", path, len(a.Data), a.Shape, a.DType)
	}
	return a, nil
}

// Box cuts the box (half-open [start, stop) per axis, which may reach
// outside the array) out of a, in C order, with fill (one element's
// bytes) outside the array.
func (a *NPY) Box(fill []byte, box [][2]int64) []byte {
	size := len(fill)
	n := 1
	for _, r := range box {
		n *= int(r[1] - r[0])
	}
	out := make([]byte, 0, n*size)
	idx := make([]int64, len(box))
	for d := range box {
		idx[d] = box[d][0]
	}
	for range n {
		off, inside := int64(0), true
		for d, v := range idx {
			if v < 0 || v >= a.Shape[d] {
				inside = false
				break
			}
			off = off*a.Shape[d] + v
		}
		if inside {
			out = append(out, a.Data[off*int64(size):(off+1)*int64(size)]...)
		} else {
			out = append(out, fill...)
		}
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < box[d][1] {
				break
			}
			idx[d] = box[d][0]
		}
	}
	return out
}

// TestdataBoxes returns, for an array of the given shape, the whole array,
// boxes that reach 2 elements before its start and 3 past its end on every
// axis, one reaching outside on both sides of every axis, and one wholly
// outside.
func TestdataBoxes(shape []int64) [][][2]int64 {
	var whole, before, after, around, outside [][2]int64
	for _, n := range shape {
		whole = append(whole, [2]int64{0, n})
		before = append(before, [2]int64{-2, (n + 1) / 2})
		after = append(after, [2]int64{n / 2, n + 3})
		around = append(around, [2]int64{-1, n + 1})
		outside = append(outside, [2]int64{n + 1, n + 3})
	}
	return [][][2]int64{whole, before, after, around, outside}
}
