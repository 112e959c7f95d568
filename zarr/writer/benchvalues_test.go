package writer

import (
	"encoding/binary"
	"encoding/hex"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// benchRowsPy prints rows of the public zarr benchmark's array as its
// generator computes them (generate_benchmark_array.py's expression, with
// numpy): for each (z, y) given, the row's 2048 values, as hex uint16 LE.
const benchRowsPy = `
import sys
import numpy as np
for arg in sys.argv[1:]:
    z, y = map(int, arg.split(","))
    row = np.fromfunction(lambda x: (x + y**2 / 32 + z**3) % 65536, shape=(2048,), dtype=np.uint16).astype(np.uint16)
    print(row.astype("<u2").tobytes().hex())
`

// TestBenchmarkFillMatchesNumpy compares BenchmarkFill with the benchmark's
// own expression evaluated by numpy, on rows where the float arithmetic
// could go wrong: large z (z³ near 2^30), y²/32 with every fraction, and
// the last rows of the array.
func TestBenchmarkFillMatchesNumpy(t *testing.T) {
	py := zarrtest.MustHavePython(t, "numpy")
	rows := [][2]int64{{0, 0}, {0, 1}, {1, 31}, {3, 33}, {17, 2047}, {511, 1000}, {1023, 2047}, {1023, 1}, {640, 1537}, {1000, 1999}}
	args := []string{"-c", benchRowsPy}
	for _, r := range rows {
		args = append(args, strconv.FormatInt(r[0], 10)+","+strconv.FormatInt(r[1], 10))
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", py, err, out)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(rows) {
		t.Fatalf("numpy printed %d rows, want %d", len(lines), len(rows))
	}
	for i, r := range rows {
		got := make([]byte, 2*2048)
		if err := BenchmarkFill(got, []zarr.Range{{Start: r[0], Stop: r[0] + 1}, {Start: r[1], Stop: r[1] + 1}, {Start: 0, Stop: 2048}}); err != nil {
			t.Fatal(err)
		}
		if h := hex.EncodeToString(got); h != lines[i] {
			for x := range 2048 {
				if h[4*x:4*x+4] != lines[i][4*x:4*x+4] {
					t.Fatalf("z %d y %d x %d: BenchmarkFill gives %d, numpy %s", r[0], r[1], x, binary.LittleEndian.Uint16(got[2*x:]), lines[i][4*x:4*x+4])
				}
			}
		}
		if v := BenchmarkValue(r[0], r[1], 2047); v != binary.LittleEndian.Uint16(got[2*2047:]) {
			t.Errorf("BenchmarkValue(%d, %d, 2047) = %d, BenchmarkFill %d", r[0], r[1], v, binary.LittleEndian.Uint16(got[2*2047:]))
		}
	}
}
