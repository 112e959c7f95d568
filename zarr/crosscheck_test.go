package zarr_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/zarrtest"

	"github.com/damacy-go/damacy/zarr"
)

// The cross-checks compare the reader with zarr-python, numcodecs and
// tensorstore: ../testdata/gen/make.py writes arrays with them (the
// committed ones in ../testdata, which TestTestdata reads, and the same
// arrays on fresh random data here), and every array is read over many
// boxes and compared, bit for bit, with what the writing library reads
// back.

// mustHavePython returns the cross-check interpreter, or skips the test
// (fails it when DAMACY_REQUIRE_PYTHON=1).
func mustHavePython(t testing.TB) string {
	t.Helper()
	return zarrtest.MustHavePython(t, "numpy", "zarr", "numcodecs", "tensorstore", "crc32c")
}

func runPython(t *testing.T, py string, args ...string) {
	t.Helper()
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", py, strings.Join(args, " "), err, out)
	}
	// Library warnings are noise here; keep the script's own summary.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("%s", lines[len(lines)-1])
}

// An npyArray is the content of a .npy file: a little-endian (or
// single-byte) C-order array.
type npyArray struct {
	dtype string // zarr v3 name
	shape []int64
	data  []byte
}

var (
	npyDescr = regexp.MustCompile(`'descr':\s*'([<|])([biuf])(\d+)'`)
	npyOrder = regexp.MustCompile(`'fortran_order':\s*False`)
	npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// readNPY reads a .npy file (format 1.0 to 3.0) of a little-endian C-order
// array of a zarr data type.
func readNPY(path string) (*npyArray, error) {
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
	a := &npyArray{dtype: dtype, data: b[start+hlen:]}
	n := int64(size)
	for f := range strings.SplitSeq(s[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: shape %q: %v", path, s[1], err)
		}
		a.shape = append(a.shape, v)
		n *= v
	}
	if int64(len(a.data)) != n {
		return nil, fmt.Errorf("%s: %d data bytes for shape %v of %s", path, len(a.data), a.shape, a.dtype)
	}
	return a, nil
}

// writeNPY writes data, little-endian C order, as a .npy file.
func writeNPY(path string, dt zarr.DataType, shape []int64, data []byte) error {
	descr := map[zarr.DataType]string{
		zarr.Bool: "|b1", zarr.Int8: "|i1", zarr.Uint8: "|u1",
		zarr.Int16: "<i2", zarr.Int32: "<i4", zarr.Int64: "<i8",
		zarr.Uint16: "<u2", zarr.Uint32: "<u4", zarr.Uint64: "<u8",
		zarr.Float16: "<f2", zarr.Float32: "<f4", zarr.Float64: "<f8",
	}[dt]
	dims := make([]string, len(shape))
	for i, n := range shape {
		dims[i] = strconv.FormatInt(n, 10)
	}
	sh := strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	b.Write(data)
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// A crossEntry is one array of a manifest of ../testdata/gen/make.py
// (../testdata/README.md describes the fields).
type crossEntry struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`       // the array, or the NGFF image group
	NGFFLevel *int     `json:"ngff_level"` // the level, for NGFF images
	NPY       string   `json:"npy"`
	DType     string   `json:"dtype"`
	Shape     []int64  `json:"shape"`
	FillLEHex string   `json:"fill_le_hex"`
	Writer    string   `json:"writer"`
	Exercises string   `json:"exercises"`
	Axes      []string `json:"axes"`  // NGFF axis names
	Error     string   `json:"error"` // set when opening must fail with ErrUnsupported and this text
}

func readCrossManifest(t *testing.T, dir string) []crossEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m []crossEntry
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// openEntry opens the array of e: the path, or level e.NGFFLevel of the
// OME-NGFF image at the path.
func openEntry(dir string, e crossEntry) (*zarr.Array, error) {
	if e.NGFFLevel == nil {
		return zarr.Open(filepath.Join(dir, e.Path))
	}
	m, err := zarr.OpenNGFF(filepath.Join(dir, e.Path))
	if err != nil {
		return nil, err
	}
	if names := axisNames(m); e.Axes != nil && !slices.Equal(names, e.Axes) {
		return nil, fmt.Errorf("axes %q, want %q", names, e.Axes)
	}
	return m.Level(*e.NGFFLevel)
}

// checkCrossEntries opens every array of a manifest and compares it with
// its .npy, bit for bit: metadata, the whole array, boxes reaching outside
// it on every side and wholly outside (outside reads as the fill value),
// then boxes random boxes. An entry with an error must fail to open with
// ErrUnsupported and a message that contains it.
func checkCrossEntries(t *testing.T, dir string, entries []crossEntry, rng *rand.Rand, boxes int) {
	for _, e := range entries {
		what := fmt.Sprintf("%s (%s; %s)", e.Name, e.Exercises, e.Writer)
		a, err := openEntry(dir, e)
		if e.Error != "" {
			if err == nil || !errors.Is(err, zarr.ErrUnsupported) || !strings.Contains(err.Error(), e.Error) {
				t.Errorf("%s: open: %v; want an ErrUnsupported error containing %q", what, err, e.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: open: %v", what, err)
			continue
		}
		want, err := readNPY(filepath.Join(dir, e.NPY))
		if err != nil {
			t.Fatal(err)
		}
		fill, err := hex.DecodeString(e.FillLEHex)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.DataType().String(); got != e.DType || want.dtype != e.DType || !slices.Equal(a.Shape(), want.shape) ||
			(e.Shape != nil && !slices.Equal(e.Shape, want.shape)) {
			t.Errorf("%s: %s %v, want %s %v (manifest %v)", what, got, a.Shape(), e.DType, want.shape, e.Shape)
			continue
		}
		if !bytes.Equal(a.FillValue(), fill) {
			t.Errorf("%s: fill value %x, want %x", what, a.FillValue(), fill)
		}
		fixed := fixedBoxes(want.shape)
		for i := range len(fixed) + boxes {
			var box []zarr.Range
			if i < len(fixed) {
				box = fixed[i]
			} else {
				box = randomBox(rng, want.shape, i)
			}
			r, err := a.ReadRegion(box)
			if err != nil {
				t.Errorf("%s: ReadRegion(%v): %v", what, box, err)
				break
			}
			exp := expectedRegion(want, fill, box)
			if r.DataType.String() != e.DType || !bytes.Equal(r.Data, exp) {
				at := firstDiff(r.Data, exp)
				t.Errorf("%s: ReadRegion(%v) differs from the writer's data at byte %d: got %x, want %x",
					what, box, at, clip(r.Data, at), clip(exp, at))
				break
			}
		}
	}
}

// fixedBoxes returns, for an array of the given shape, the whole array,
// boxes that reach 2 elements before its start and 3 past its end on
// every axis, one reaching outside on both sides of every axis, and one
// wholly outside.
func fixedBoxes(shape []int64) [][]zarr.Range {
	var whole, before, after, around, outside []zarr.Range
	for _, n := range shape {
		whole = append(whole, zarr.Range{Start: 0, Stop: n})
		before = append(before, zarr.Range{Start: -2, Stop: (n + 1) / 2})
		after = append(after, zarr.Range{Start: n / 2, Stop: n + 3})
		around = append(around, zarr.Range{Start: -1, Stop: n + 1})
		outside = append(outside, zarr.Range{Start: n + 1, Stop: n + 3})
	}
	return [][]zarr.Range{whole, before, after, around, outside}
}

// randomBox returns random box i for an array of the given shape: boxes
// that may reach up to 3 elements past either end, one in eight of them
// wholly outside.
func randomBox(rng *rand.Rand, shape []int64, i int) []zarr.Range {
	box := make([]zarr.Range, len(shape))
	for d, n := range shape {
		switch {
		case i%8 == 7 && d == 0:
			start := n + rng.Int64N(3)
			box[d] = zarr.Range{Start: start, Stop: start + 1 + rng.Int64N(3)}
		default:
			start := rng.Int64N(n+6) - 3
			box[d] = zarr.Range{Start: start, Stop: start + 1 + rng.Int64N(min(n+3, 12))}
		}
	}
	return box
}

// expectedRegion cuts box out of a, with fill outside a.
func expectedRegion(a *npyArray, fill []byte, box []zarr.Range) []byte {
	size := len(fill)
	n := 1
	for _, r := range box {
		n *= int(r.Len())
	}
	out := make([]byte, 0, n*size)
	idx := make([]int64, len(box))
	for d := range box {
		idx[d] = box[d].Start
	}
	for range n {
		off, inside := int64(0), true
		for d, v := range idx {
			if v < 0 || v >= a.shape[d] {
				inside = false
				break
			}
			off = off*a.shape[d] + v
		}
		if inside {
			out = append(out, a.data[off*int64(size):(off+1)*int64(size)]...)
		} else {
			out = append(out, fill...)
		}
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < box[d].Stop {
				break
			}
			idx[d] = box[d].Start
		}
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func clip(b []byte, at int) []byte { return b[at:min(len(b), at+16)] }

// TestCrosscheckPython reads arrays that zarr-python, numcodecs and
// tensorstore write on fresh random data (a new seed every run): the
// stores of ../testdata (every data type, v2 and v3, every codec,
// sharding, key encodings, fill values, missing chunks, OME-NGFF 0.4 and
// 0.5 with labels), written by the same generator on other data. The
// generator must list the committed stores (or they are out of date).
func TestCrosscheckPython(t *testing.T) {
	py := mustHavePython(t)
	dir := t.TempDir()
	seed := time.Now().UnixNano() % 1e9
	t.Logf("seed %d", seed)
	runPython(t, py, filepath.Join("..", "testdata", "gen", "make.py"), "--out", dir, "--seed", strconv.FormatInt(seed, 10))
	entries := readCrossManifest(t, dir)
	committed := readCrossManifest(t, filepath.Join("..", "testdata"))
	var names, want []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	for _, e := range committed {
		want = append(want, e.Name)
	}
	if !slices.Equal(names, want) {
		t.Errorf("the generator writes %d arrays, ../testdata holds %d (or others): rerun testdata/gen/make.py", len(names), len(want))
	}
	checkCrossEntries(t, dir, entries, rand.New(rand.NewPCG(uint64(seed), 3)), 30)
}
