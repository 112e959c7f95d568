package zarr_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// openEntry opens the array of e: the path, or level e.NGFFLevel of the
// OME-NGFF image at the path.
func openEntry(dir string, e zarrtest.TestdataArray) (*zarr.Array, error) {
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
func checkCrossEntries(t *testing.T, dir string, entries []zarrtest.TestdataArray, rng *rand.Rand, boxes int) {
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
		want, err := zarrtest.ReadNPY(filepath.Join(dir, e.NPY))
		if err != nil {
			t.Fatal(err)
		}
		fill := e.Fill()
		if got := a.DataType().String(); got != e.DType || want.DType != e.DType || !slices.Equal(a.Shape(), want.Shape) ||
			(e.Shape != nil && !slices.Equal(e.Shape, want.Shape)) {
			t.Errorf("%s: %s %v, want %s %v (manifest %v)", what, got, a.Shape(), e.DType, want.Shape, e.Shape)
			continue
		}
		if !bytes.Equal(a.FillValue(), fill) {
			t.Errorf("%s: fill value %x, want %x", what, a.FillValue(), fill)
		}
		fixed := zarrtest.TestdataBoxes(want.Shape)
		for i := range len(fixed) + boxes {
			var box [][2]int64
			if i < len(fixed) {
				box = fixed[i]
			} else {
				box = randomBox(rng, want.Shape, i)
			}
			zbox := make([]zarr.Range, len(box))
			for d, r := range box {
				zbox[d] = zarr.Range{Start: r[0], Stop: r[1]}
			}
			r, err := a.ReadRegion(zbox)
			if err != nil {
				t.Errorf("%s: ReadRegion(%v): %v", what, box, err)
				break
			}
			exp := want.Box(fill, box)
			if r.DataType.String() != e.DType || !bytes.Equal(r.Data, exp) {
				at := firstDiff(r.Data, exp)
				t.Errorf("%s: ReadRegion(%v) differs from the writer's data at byte %d: got %x, want %x",
					what, box, at, clip(r.Data, at), clip(exp, at))
				break
			}
		}
	}
}

// randomBox returns random box i for an array of the given shape: boxes
// that may reach up to 3 elements past either end, one in eight of them
// wholly outside.
func randomBox(rng *rand.Rand, shape []int64, i int) [][2]int64 {
	box := make([][2]int64, len(shape))
	for d, n := range shape {
		switch {
		case i%8 == 7 && d == 0:
			start := n + rng.Int64N(3)
			box[d] = [2]int64{start, start + 1 + rng.Int64N(3)}
		default:
			start := rng.Int64N(n+6) - 3
			box[d] = [2]int64{start, start + 1 + rng.Int64N(min(n+3, 12))}
		}
	}
	return box
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
	entries := zarrtest.ReadTestdata(t, dir)
	committed := zarrtest.ReadTestdata(t, testdataDir)
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
