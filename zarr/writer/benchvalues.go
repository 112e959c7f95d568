package writer

import (
	"encoding/binary"
	"fmt"

	"github.com/damacy-go/damacy/zarr"
)

// BenchmarkValue is the element at (z, y, x) of the arrays of the public
// zarr benchmark (LDeakin/zarr_benchmarks, written by its
// generate_benchmark_array.py): (x + y²/32 + z³) mod 65536 as a uint16,
// where the script computes in float64 and truncates, which for these
// integers is (x + ⌊y²/32⌋ + z³) mod 65536. z, y and x are the three
// axes in stored order, x the fastest.
func BenchmarkValue(z, y, x int64) uint16 {
	return uint16(x + y*y/32 + z*z*z)
}

// BenchmarkFill writes the elements of box (of a rank-3 uint16 array) into
// dst as BenchmarkValue gives them, C order, little-endian. It has the
// signature Array.WriteFrom takes, and is safe for concurrent use.
func BenchmarkFill(dst []byte, box []zarr.Range) error {
	if len(box) != 3 {
		return fmt.Errorf("writer: benchmark values need a rank-3 box, not rank %d: %w", len(box), ErrInvalid)
	}
	if n := boxBytes(box, 2); len(dst) != n {
		return fmt.Errorf("writer: benchmark buffer is %d bytes; the box needs %d: %w", len(dst), n, ErrInvalid)
	}
	o := 0
	for z := box[0].Start; z < box[0].Stop; z++ {
		for y := box[1].Start; y < box[1].Stop; y++ {
			base := BenchmarkValue(z, y, 0)
			for x := box[2].Start; x < box[2].Stop; x++ {
				binary.LittleEndian.PutUint16(dst[o:], base+uint16(x))
				o += 2
			}
		}
	}
	return nil
}
