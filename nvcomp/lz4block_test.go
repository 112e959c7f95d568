package nvcomp

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// TestLZ4GPUCheckEncoders checks that blocks from pierrec's fast and HC
// encoders pass, with their exact size only, and that no strict prefix of
// a block passes.
func TestLZ4GPUCheckEncoders(t *testing.T) {
	r := newRand(t)
	for _, size := range []int{1, 12, 13, 300, 64 << 10, 256<<10 + 6, 1 << 20} {
		for kind, src := range testSources(r, size) {
			for _, hc := range []bool{false, true} {
				name := fmt.Sprintf("%s/%d/hc=%v", kind, size, hc)
				block := lz4Encode(t, src, hc)
				if err := LZ4GPUCheck(block, size); err != nil {
					t.Errorf("%s: LZ4GPUCheck = %v", name, err)
				}
				for _, want := range []int{size - 1, size + 1} {
					if want > 0 && LZ4GPUCheck(block, want) == nil {
						t.Errorf("%s: LZ4GPUCheck(block, %d) = nil; want an error", name, want)
					}
				}
				if size > 1<<16 {
					continue // prefixes of the small blocks suffice
				}
				for n := range len(block) {
					if LZ4GPUCheck(block[:n], size) == nil {
						t.Fatalf("%s: prefix of %d of %d bytes passes", name, n, len(block))
					}
				}
			}
		}
	}
}

// lz4Seq appends one sequence: literals, then a match of length ml (>= 4)
// at offset off, or none when ml == 0.
func lz4Seq(b []byte, lit []byte, off, ml int) []byte {
	ln, mn := min(len(lit), 15), 0
	if ml > 0 {
		mn = min(ml-4, 15)
	}
	b = append(b, byte(ln<<4|mn))
	if len(lit) >= 15 {
		for n := len(lit) - 15; ; n -= 255 {
			if n < 255 {
				b = append(b, byte(n))
				break
			}
			b = append(b, 255)
		}
	}
	b = append(b, lit...)
	if ml == 0 {
		return b
	}
	b = append(b, byte(off), byte(off>>8))
	if ml-4 >= 15 {
		for n := ml - 4 - 15; ; n -= 255 {
			if n < 255 {
				b = append(b, byte(n))
				break
			}
			b = append(b, 255)
		}
	}
	return b
}

// TestLZ4GPUCheckRules checks hand-made blocks against each rule, and that
// pierrec agrees with every block that passes.
func TestLZ4GPUCheckRules(t *testing.T) {
	lit := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	tests := []struct {
		what  string
		block []byte
		want  int
		err   error
	}{
		{"literals only", lz4Seq(nil, lit(20), 0, 0), 20, nil},
		{"one match", lz4Seq(lz4Seq(nil, lit(8), 8, 300), lit(5), 0, 0), 313, nil},
		{"long literal run", lz4Seq(nil, lit(600), 0, 0), 600, nil},
		{"too short", lz4Seq(nil, lit(20), 0, 0), 21, errLZ4Size},
		{"too long", lz4Seq(nil, lit(20), 0, 0), 19, errLZ4Size},
		{"offset zero", lz4Seq(lz4Seq(nil, lit(8), 0, 20), lit(5), 0, 0), 33, errLZ4Offset},
		{"offset before the output", lz4Seq(lz4Seq(nil, lit(8), 9, 20), lit(5), 0, 0), 33, errLZ4Offset},
		{"last 4 bytes a match", lz4Seq(lz4Seq(nil, lit(20), 8, 8), lit(4), 0, 0), 32, errLZ4End},
		{"last match too late", lz4Seq(lz4Seq(nil, lit(20), 8, 4), lit(7), 0, 0), 31, errLZ4End},
		{"ends after a match", lz4Seq(nil, lit(20), 8, 20), 60, errLZ4Truncated},
		{"match nibble in the last token", append(lz4Seq(nil, nil, 0, 0)[:0], 0x52, 'a', 'b', 'c', 'd', 'e'), 5, errLZ4End},
		{"empty", nil, 1, errLZ4Truncated},
		{"zero size", lz4Seq(nil, lit(1), 0, 0), 0, errLZ4Empty},
	}
	for _, tt := range tests {
		err := LZ4GPUCheck(tt.block, tt.want)
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: LZ4GPUCheck = %v; want %v", tt.what, err, tt.err)
		}
		if err == nil {
			if got, err := cpuLZ4(tt.block, tt.want); err != nil || len(got) != tt.want {
				t.Errorf("%s: passes the check, but pierrec decodes %d bytes, %v", tt.what, len(got), err)
			}
		}
	}
}

// FuzzLZ4GPUCheck checks that every block that passes decodes with pierrec
// to exactly the expected size; damaged encoder output is the seed corpus.
func FuzzLZ4GPUCheck(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, src := range [][]byte{smoothU16(r, 4000, 40, 3), shuffle2(smoothU16(r, 3000, 40, 2)), randomBytes(r, 700)} {
		for _, hc := range []bool{false, true} {
			b := lz4Encode(f, src, hc)
			f.Add(b, len(src))
			c := append([]byte{}, b...)
			c[r.IntN(len(c))] ^= 1 << r.IntN(8)
			f.Add(c, len(src))
		}
	}
	f.Fuzz(func(t *testing.T, block []byte, want int) {
		if want > 1<<20 {
			want = 1 << 20
		}
		if LZ4GPUCheck(block, want) != nil {
			return
		}
		dst := make([]byte, want+64)
		n, err := lz4.UncompressBlock(block, dst)
		if err != nil || n != want {
			t.Errorf("passes the check, but pierrec decodes %d bytes, %v; want %d", n, err, want)
		}
	})
}

// BenchmarkLZ4GPUCheck measures the walk on 1 MiB blocks, in bytes of
// output per second.
func BenchmarkLZ4GPUCheck(b *testing.B) {
	r := newRand(b)
	for kind, src := range testSources(r, 1<<20) {
		block := lz4Encode(b, src, false)
		b.Run(kind, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if err := LZ4GPUCheck(block, len(src)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
