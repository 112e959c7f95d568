package blosc

import (
	"bytes"
	"fmt"
	"testing"
)

// tokenCounts tallies a blosclz stream's tokens.
type tokenCounts struct {
	literals, near, far, long int  // literal runs, near and far matches, matches with length bytes
	lastLiteral               bool // the stream ends with a literal run
}

// blosclzTokens reads a blosclz stream's tokens independently of the
// decoder.
func blosclzTokens(src []byte) (tokenCounts, error) {
	var c tokenCounts
	ip := 0
	for ip < len(src) {
		ctrl := int(src[ip])
		if ip == 0 {
			ctrl &= 31
		}
		ip++
		c.lastLiteral = ctrl < 32
		if ctrl < 32 {
			c.literals++
			ip += ctrl + 1
			continue
		}
		if ctrl>>5 == 7 {
			c.long++
			for ip < len(src) && src[ip] == 255 {
				ip++
			}
			ip++
		}
		if ip >= len(src) {
			return c, fmt.Errorf("truncated match at %d", ip)
		}
		if ctrl&31 == 31 && src[ip] == 255 {
			c.far++
			ip += 3
		} else {
			c.near++
			ip++
		}
	}
	if ip != len(src) {
		return c, fmt.Errorf("last token overruns the stream by %d bytes", ip-len(src))
	}
	return c, nil
}

var blosclzTests = []struct {
	name string
	in   []byte // stream
	out  string // decoded, or "" for an error
}{
	{"literal", []byte{2, 'a', 'b', 'c'}, "abc"},
	{"marker bits ignored on the first byte", []byte{0xe2, 'a', 'b', 'c'}, "abc"},
	{"run", []byte{0, 'a', 0x20, 0}, "aaaa"},
	{"overlapping match", []byte{1, 'a', 'b', 0x80, 1}, "abababab"},
	{"match then literal", []byte{2, 'a', 'b', 'c', 0x20, 2, 0, 'z'}, "abcabcz"},
	{"extended length", []byte{0, 'x', 0xe0, 1, 0}, "xxxxxxxxxxx"},
	{"extended length 255", []byte{0, 'x', 0xe0, 255, 0, 0}, "x" + string(bytes.Repeat([]byte{'x'}, 9+255))},
	{"empty", []byte{}, ""},
	{"literal past input", []byte{3, 'a', 'b'}, ""},
	{"distance before start", []byte{0, 'a', 0x20, 1}, ""},
	{"length bytes missing", []byte{0, 'a', 0xe0, 255}, ""},
	{"distance byte missing", []byte{0, 'a', 0x20}, ""},
	{"far bytes missing", []byte{0, 'a', 0x3f, 255, 0}, ""},
}

func TestDecodeBloscLZ(t *testing.T) {
	for _, tt := range blosclzTests {
		dst := make([]byte, len(tt.out))
		if tt.out == "" {
			dst = make([]byte, 16)
		}
		err := decodeBloscLZ(dst, tt.in)
		switch {
		case tt.out == "" && err == nil:
			t.Errorf("%s: decodeBloscLZ(%x) = %q, nil; want an error", tt.name, tt.in, dst)
		case tt.out != "" && (err != nil || string(dst) != tt.out):
			t.Errorf("%s: decodeBloscLZ(%x) = %q, %v; want %q", tt.name, tt.in, dst, err, tt.out)
		}
	}
	// Output must be filled exactly: one byte short and one byte over fail.
	for _, n := range []int{2, 4} {
		if err := decodeBloscLZ(make([]byte, n), []byte{2, 'a', 'b', 'c'}); err == nil {
			t.Errorf("decodeBloscLZ of 3 bytes into %d: nil error", n)
		}
	}
}

// TestBloscLZFarMatch builds a far match by hand: 8192 literal bytes, then
// a match 8192+far back.
func TestBloscLZFarMatch(t *testing.T) {
	rng := testRNG(t)
	lits := randomData(rng, 9000)
	var stream []byte
	for i := 0; i < len(lits); i += 32 {
		n := min(32, len(lits)-i)
		stream = append(stream, byte(n-1))
		stream = append(stream, lits[i:i+n]...)
	}
	// Match of length 5 at distance 8192+700 = 8892: copies lits[108:113].
	stream = append(stream, 3<<5|31, 255, 700>>8, 700&255, 0, 'z')
	want := append(bytes.Clone(lits), lits[108:113]...)
	want = append(want, 'z')
	dst := make([]byte, len(want))
	if err := decodeBloscLZ(dst, stream); err != nil || !bytes.Equal(dst, want) {
		t.Fatalf("far match: %v, differs at %d", err, firstDiff(dst, want))
	}
	// A far value of 0 is distance 8192, one past the longest near one.
	nearest := bytes.Clone(stream)
	nearest[len(nearest)-4], nearest[len(nearest)-3] = 0, 0
	want = append(bytes.Clone(lits), lits[808:813]...)
	want = append(want, 'z')
	if err := decodeBloscLZ(dst, nearest); err != nil || !bytes.Equal(dst, want) {
		t.Fatalf("far match at 8192: %v, differs at %d", err, firstDiff(dst, want))
	}
}

// TestBloscLZEncoder round-trips the encoder on data that exercises runs,
// near and far matches and long lengths, and checks the tokens it chose.
func TestBloscLZEncoder(t *testing.T) {
	rng := testRNG(t)
	table := new([1 << blosclzTableBits]int32)
	tests := []struct {
		name          string
		in            []byte
		far, longLens bool
	}{
		{"far", farData(rng, 60000), true, true},
		{"runs", bytes.Repeat([]byte{7}, 5000), false, true},
		{"smooth", smoothData(rng, 30000, 2), false, false},
		{"text", bytes.Repeat([]byte("blosc splits blocks into streams; "), 300), false, true},
	}
	for _, tt := range tests {
		buf := make([]byte, len(tt.in))
		n := encodeBloscLZ(buf, tt.in, table)
		if n == 0 {
			t.Errorf("%s: encodeBloscLZ did not compress %d bytes", tt.name, len(tt.in))
			continue
		}
		c, err := blosclzTokens(buf[:n])
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		// c-blosc 1.21's decoder rejects a trailing match: the stream must end
		// with literals.
		if tt.far && c.far == 0 || tt.longLens && c.long == 0 || c.near == 0 || !c.lastLiteral {
			t.Errorf("%s: tokens %+v", tt.name, c)
		}
		dst := make([]byte, len(tt.in))
		if err := decodeBloscLZ(dst, buf[:n]); err != nil || !bytes.Equal(dst, tt.in) {
			t.Errorf("%s: decode(encode) = %v, differs at %d", tt.name, err, firstDiff(dst, tt.in))
		}
	}
	// Incompressible input reports 0.
	in := randomData(rng, 1000)
	if n := encodeBloscLZ(make([]byte, len(in)), in, table); n != 0 {
		t.Errorf("encodeBloscLZ(random) = %d, want 0", n)
	}
}
