package zarr

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestParseDataType(t *testing.T) {
	for _, dt := range allTypes {
		got, err := ParseDataType(dt.String())
		if got != dt || err != nil {
			t.Errorf("ParseDataType(%q) = %v, %v; want %v, nil", dt.String(), got, err, dt)
		}
	}
	sizes := map[DataType]int{Bool: 1, Int8: 1, Uint8: 1, Int16: 2, Uint16: 2, Float16: 2, Int32: 4, Uint32: 4, Float32: 4, Int64: 8, Uint64: 8, Float64: 8}
	for dt, n := range sizes {
		if dt.Size() != n {
			t.Errorf("%v.Size() = %d, want %d", dt, dt.Size(), n)
		}
	}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"complex64", ErrUnsupported},
		{"r16", ErrUnsupported},
		{"string", ErrUnsupported},
		{"UINT16", ErrUnsupported},
		{"", ErrFormat},
	} {
		got, err := ParseDataType(tt.name)
		if got != 0 || !errors.Is(err, tt.err) {
			t.Errorf("ParseDataType(%q) = %v, %v; want 0, %v", tt.name, got, err, tt.err)
		}
	}
	if s := DataType(0).String(); s != "DataType(0)" {
		t.Errorf("DataType(0).String() = %q", s)
	}
	if DataType(200).Size() != 0 {
		t.Error("an invalid DataType has a size")
	}
}

func TestParseTypestr(t *testing.T) {
	for _, tt := range []struct {
		in     string
		dt     DataType
		endian Endian
		err    error
	}{
		{"<u2", Uint16, LittleEndian, nil},
		{">u2", Uint16, BigEndian, nil},
		{"<f4", Float32, LittleEndian, nil},
		{">f8", Float64, BigEndian, nil},
		{"<f2", Float16, LittleEndian, nil},
		{"|u1", Uint8, LittleEndian, nil},
		{"|i1", Int8, LittleEndian, nil},
		{"|b1", Bool, LittleEndian, nil},
		{"<i8", Int64, LittleEndian, nil},
		{">i4", Int32, BigEndian, nil},
		{"|u2", 0, 0, ErrFormat},
		{"=u2", 0, 0, ErrFormat},
		{"<c8", 0, 0, ErrUnsupported},
		{"<M8[ns]", 0, 0, ErrUnsupported},
		{"|S10", 0, 0, ErrUnsupported},
		{"u2", 0, 0, ErrFormat},
	} {
		dt, e, err := parseTypestr(tt.in)
		if dt != tt.dt || e != tt.endian || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("parseTypestr(%q) = %v, %v, %v; want %v, %v, %v", tt.in, dt, e, err, tt.dt, tt.endian, tt.err)
		}
	}
}

// TestFloat16 checks float16Bits against float16Float64 on every binary16
// value, on the midpoints between neighbours (ties to even), and on random
// float64s against a float32 reference.
func TestFloat16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := float16Float64(uint16(h))
		got := float16Bits(f)
		if math.IsNaN(f) {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("float16Bits(NaN %#04x) = %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("float16Bits(%v) = %#04x, want %#04x", f, got, h)
		}
		// The midpoint to the next value up (in magnitude) rounds to the
		// even one of the two.
		if h&0x7fff < 0x7bff {
			next := float16Float64(uint16(h + 1))
			mid := (f + next) / 2
			want := uint16(h)
			if h&1 == 1 {
				want = uint16(h + 1)
			}
			if got := float16Bits(mid); got != want {
				t.Fatalf("float16Bits(midpoint %v) = %#04x, want %#04x", mid, got, want)
			}
		}
	}
	for _, tt := range []struct {
		in   float64
		want uint16
	}{
		{65504, 0x7bff}, {65520, 0x7c00}, {65519.99, 0x7bff}, {1e10, 0x7c00}, {-1e10, 0xfc00},
		{math.Ldexp(1, -24), 0x0001}, {math.Ldexp(1, -25), 0x0000}, {math.Ldexp(1.0000001, -25), 0x0001},
		{math.Copysign(0, -1), 0x8000}, {math.Ldexp(1, -14), 0x0400}, {math.Ldexp(1023.5, -24), 0x0400},
	} {
		if got := float16Bits(tt.in); got != tt.want {
			t.Errorf("float16Bits(%v) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
	rng := rand.New(rand.NewPCG(4, uint64(testSeed(t))))
	for range 100000 {
		f := math.Ldexp(rng.Float64()*2-1, rng.IntN(40)-25)
		h := float16Bits(f)
		back := float16Float64(h)
		// back must be a nearest binary16 value: no neighbour is closer.
		for _, n := range []uint16{h + 1, h - 1} {
			if n&0x7c00 == 0x7c00 {
				continue
			}
			if math.Abs(float16Float64(n)-f) < math.Abs(back-f) {
				t.Fatalf("float16Bits(%v) = %#04x (%v), but %#04x (%v) is closer", f, h, back, n, float16Float64(n))
			}
		}
	}
}
