package ptx

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestConvertRow compares a row of convertRows (vector loop and tail) with the
// portable loop and with castRow and writeRow, for every row kind, at
// every length up to 70 and unaligned starts, on random values and every
// extreme of the source types.
func TestConvertRow(t *testing.T) {
	rng := newRand(t)
	srcs := map[Dtype]int{Uint8: 1, Uint16: 2, Int16: 2}
	for src, size := range srcs {
		for _, outType := range []Dtype{Float32, BFloat16} {
			k, ok := rowKindOf(src, outType)
			if !ok {
				t.Fatalf("no row kind for %v -> %v", src, outType)
			}
			in, osz := k.sizes()
			if in != size || osz != outType.Size() {
				t.Fatalf("%v -> %v: sizes %d, %d", src, outType, in, osz)
			}
			for n := 0; n <= 70; n++ {
				for off := range 3 {
					raw := make([]byte, (n+off+1)*size)
					for i := range raw {
						raw[i] = byte(rng.Uint32())
					}
					// Extremes: 0, the largest, and for int16 the smallest.
					if n > 2 {
						copy(raw[off*size:], []byte{0xff, 0x7f, 0x00, 0x80}[:size])
						copy(raw[(off+1)*size:], []byte{0xff, 0xff}[:size])
						copy(raw[(off+2)*size:], []byte{0x00, 0x00}[:size])
					}
					s := raw[off*size : (off+n)*size]
					got := bytes.Repeat([]byte{poison}, (n+2)*osz)
					want := bytes.Repeat([]byte{poison}, (n+2)*osz)
					var sp unsafe.Pointer
					if n > 0 {
						sp = unsafe.Pointer(&s[0])
					}
					convertRows(k, unsafe.Pointer(&got[osz]), sp, n, 1, 0, 0)
					convertRowGo(k, unsafe.Pointer(&want[osz]), sp, n)
					if !bytes.Equal(got, want) {
						t.Fatalf("%v -> %v, n %d, offset %d: convertRows %x, portable loop %x", src, outType, n, off, got, want)
					}
					// The portable loop against the general path.
					if n == 0 {
						continue
					}
					r := make([]uint64, n)
					for i := range r {
						for j := range size {
							r[i] |= uint64(s[i*size+j]) << (8 * j)
						}
					}
					v := make([]uint32, n)
					castRow(v, r, src)
					ref := make([]byte, n*osz)
					writeRow(ref, outType, 0, 1, v, make([]uint16, n))
					if !bytes.Equal(want[osz:osz+n*osz], ref) {
						t.Fatalf("%v -> %v, n %d: portable loop %x, castRow+writeRow %x", src, outType, n, want[osz:osz+n*osz], ref)
					}
				}
			}
		}
	}
	if _, ok := rowKindOf(Float32, Float32); ok {
		t.Error("a row kind for float32 sources")
	}
}
