package ptx

import (
	"fmt"
	"math"
	"math/big"
	"runtime"
	"sync"
	"testing"
)

// bf16Ref rounds float32 bits to bfloat16 the long way: it takes the two
// bfloat16 neighbours of x (truncated, and one step further from zero,
// letting the step past the largest finite value land on Inf as an
// unbounded exponent would), measures both distances exactly in float64,
// and picks the nearer one, the even one on a tie.
func bf16Ref(f uint32) uint16 {
	x := math.Float32frombits(f)
	switch {
	case x != x:
		return 0x7fff
	case math.IsInf(float64(x), 0):
		return uint16(f >> 16)
	}
	lo := uint16(f >> 16)
	hi := lo + 1
	ax := math.Abs(float64(x))
	dlo := ax - bf16Magnitude(lo)
	dhi := bf16Magnitude(hi) - ax
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

// bf16RefBits rounds float32 bits to bfloat16 by the textbook rule on the
// 16 bits that are cut: more than half an ulp rounds the magnitude up, less
// rounds down, exactly half rounds to the even neighbour. Rounding up
// carries into the exponent, so the largest finite values overflow to Inf.
func bf16RefBits(f uint32) uint16 {
	if f&0x7fffffff > 0x7f800000 {
		return 0x7fff
	}
	lo, cut := uint16(f>>16), f&0xffff
	if cut > 0x8000 || cut == 0x8000 && lo&1 == 1 {
		return lo + 1
	}
	return lo
}

// bf16Magnitude returns |h| exactly, reading exponent 255 as 2^128.
func bf16Magnitude(h uint16) float64 {
	e := int(h>>7) & 0xff
	m := float64(h & 0x7f)
	if e == 0 {
		return math.Ldexp(m, -133)
	}
	return math.Ldexp(128+m, e-134)
}

var bf16Tests = []struct {
	in  uint32
	out uint16
}{
	{0x00000000, 0x0000},
	{0x80000000, 0x8000},
	{0x3f800000, 0x3f80}, // 1
	{0x3f808000, 0x3f80}, // tie, down to even
	{0x3f818000, 0x3f82}, // tie, up to even
	{0x3f808001, 0x3f81}, // above the tie
	{0x3f807fff, 0x3f80}, // below the tie
	{0x7f7fffff, 0x7f80}, // MaxFloat32 overflows to +Inf
	{0xff7fffff, 0xff80},
	{0x7f7f7fff, 0x7f7f}, // largest value that stays finite
	{0x7f7f8000, 0x7f80}, // tie at the top: to even, which is Inf
	{0x7f800000, 0x7f80}, // +Inf
	{0xff800000, 0xff80}, // -Inf
	{0x7fc00000, 0x7fff}, // quiet NaN
	{0xffc00000, 0x7fff}, // negative NaN
	{0x7f800001, 0x7fff}, // NaN whose payload is all in the low half
	{0xffffffff, 0x7fff},
	{0x00000001, 0x0000}, // smallest subnormal
	{0x00008000, 0x0000}, // subnormal tie, down to even
	{0x00018000, 0x0002}, // subnormal tie, up to even
	{0x007fffff, 0x0080}, // largest subnormal rounds to the smallest normal
}

func TestBFloat16Bits(t *testing.T) {
	for _, tt := range bf16Tests {
		if got := BFloat16Bits(tt.in); got != tt.out {
			t.Errorf("BFloat16Bits(%#08x) = %#04x; want %#04x", tt.in, got, tt.out)
		}
		if got := bf16Ref(tt.in); got != tt.out {
			t.Errorf("bf16Ref(%#08x) = %#04x; want %#04x", tt.in, got, tt.out)
		}
		if got := bf16RefBits(tt.in); got != tt.out {
			t.Errorf("bf16RefBits(%#08x) = %#04x; want %#04x", tt.in, got, tt.out)
		}
	}
	rng := newRand(t)
	for range 1 << 20 {
		f := rng.Uint32()
		if got, want := BFloat16Bits(f), bf16Ref(f); got != want || bf16RefBits(f) != want {
			t.Fatalf("BFloat16Bits(%#08x) = %#04x, bf16RefBits = %#04x; want %#04x", f, got, bf16RefBits(f), want)
		}
	}
}

// TestBFloat16BitsExhaustive compares BFloat16Bits with bf16RefBits on all
// 2^32 float32 bit patterns (bf16RefBits itself agrees with the slower
// bf16Ref on the sampled inputs of TestBFloat16Bits).
func TestBFloat16BitsExhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("all 2^32 inputs: skipped in -short mode")
	}
	workers := runtime.GOMAXPROCS(0)
	const span = 1 << 32
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for f := uint64(w) * span / uint64(workers); f < uint64(w+1)*span/uint64(workers); f++ {
				if got, want := BFloat16Bits(uint32(f)), bf16RefBits(uint32(f)); got != want {
					errs[w] = fmt.Errorf("BFloat16Bits(%#08x) = %#04x; want %#04x", f, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// float32Ref is the nearest float32 (ties to even, subnormals included) to
// the exact value x, through math/big.
func float32Ref(x *big.Float) uint32 {
	f, _ := x.Float32()
	return math.Float32bits(f)
}

func TestFloat32BitsIntegers(t *testing.T) {
	rng := newRand(t)
	// Values near powers of two exercise rounding: 2^24 and up lose bits.
	near := func() uint64 {
		p := rng.IntN(64)
		return uint64(1)<<p + uint64(rng.IntN(512)) - 256
	}
	for _, d := range []Dtype{Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64} {
		width := 8 * d.Size()
		signed := d <= Int64
		values := []uint64{0, 1, math.MaxUint64, 1 << (width - 1), 1<<(width-1) - 1, 1<<24 + 1, 1<<25 + 3, 1<<53 + 1}
		for range 100000 {
			values = append(values, rng.Uint64(), near(), -near())
		}
		for _, v := range values {
			exact := new(big.Float)
			bits := v
			if width < 64 {
				bits &= 1<<width - 1
			}
			if signed {
				exact.SetInt64(int64(bits<<(64-width)) >> (64 - width))
			} else {
				exact.SetUint64(bits)
			}
			// High garbage above the type's width must not matter.
			if got, want := Float32Bits(d, v), float32Ref(exact); got != want {
				t.Fatalf("Float32Bits(%v, %#x) = %#08x; want %#08x (%v)", d, v, got, want, exact)
			}
		}
	}
}

func TestFloat32BitsBool(t *testing.T) {
	for v := range uint64(256) {
		want := uint32(0x3f800000)
		if v == 0 {
			want = 0
		}
		if got := Float32Bits(Bool, v|0xabcd00); got != want {
			t.Errorf("Float32Bits(Bool, %#x) = %#08x; want %#08x", v|0xabcd00, got, want)
		}
	}
}

// TestFloat32BitsFloat16 checks all 65536 float16 values against their
// value computed from the definition of binary16.
func TestFloat32BitsFloat16(t *testing.T) {
	for h := range uint64(1 << 16) {
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		e, m := int(h>>10)&0x1f, float64(h&0x3ff)
		var want uint32
		switch {
		case e == 0x1f && m == 0:
			want = math.Float32bits(float32(math.Inf(int(sign))))
		case e == 0x1f: // NaN: sign, payload, quiet bit
			want = uint32(h&0x8000)<<16 | 0x7fc00000 | uint32(h&0x3ff)<<13
		case e == 0:
			want = math.Float32bits(float32(sign * math.Ldexp(m, -24)))
		default:
			want = math.Float32bits(float32(sign * math.Ldexp(1024+m, e-25)))
		}
		if got := Float32Bits(Float16, h|0x12340000); got != want {
			t.Errorf("Float32Bits(Float16, %#04x) = %#08x; want %#08x", h, got, want)
		}
	}
}

func TestFloat32BitsFloats(t *testing.T) {
	rng := newRand(t)
	// float32 passes through, NaN payloads included.
	for _, v := range []uint64{0, 0x80000000, 0x7f800001, 0xffffffff, 0x7fc00000, 0x00000001, 0x3f800000} {
		if got := Float32Bits(Float32, v|0xdead00000000); got != uint32(v) {
			t.Errorf("Float32Bits(Float32, %#x) = %#08x; want %#08x", v, got, uint32(v))
		}
	}
	// float64: exponents across the float32 range, its subnormals and
	// beyond, and every kind of special value.
	values := []uint64{
		0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0xfff8000000000001,
		0x7ff0000000000001, 0x7ff0000020000000, 0x7ff7ffffffffffff, 0x0000000000000001,
		math.Float64bits(math.MaxFloat32), math.Float64bits(math.SmallestNonzeroFloat32),
		math.Float64bits(math.SmallestNonzeroFloat32 / 2), math.Float64bits(math.SmallestNonzeroFloat32 * 0.75),
	}
	for range 200000 {
		exp := uint64(1023-160+rng.IntN(330)) << 52
		values = append(values, rng.Uint64()&(1<<63|1<<52-1)|exp, rng.Uint64())
	}
	for _, v := range values {
		var want uint32
		x := math.Float64frombits(v)
		switch {
		case x != x:
			want = uint32(v>>32)&0x80000000 | 0x7fc00000 | uint32(v>>29)&0x3fffff
		default:
			want = float32Ref(new(big.Float).SetFloat64(x))
		}
		if got := Float32Bits(Float64, v); got != want {
			t.Fatalf("Float32Bits(Float64, %#016x) = %#08x; want %#08x", v, got, want)
		}
	}
}

func TestDtype(t *testing.T) {
	tests := []struct {
		d                       Dtype
		name                    string
		size                    int
		source, output, integer bool
	}{
		{0, "Dtype(0)", 0, false, false, false},
		{Bool, "bool", 1, true, false, false},
		{Int8, "int8", 1, true, true, true},
		{Int16, "int16", 2, true, true, true},
		{Int32, "int32", 4, true, true, true},
		{Int64, "int64", 8, true, true, true},
		{Uint8, "uint8", 1, true, true, true},
		{Uint16, "uint16", 2, true, true, true},
		{Uint32, "uint32", 4, true, true, true},
		{Uint64, "uint64", 8, true, false, true},
		{Float16, "float16", 2, true, false, false},
		{Float32, "float32", 4, true, true, false},
		{Float64, "float64", 8, true, false, false},
		{BFloat16, "bfloat16", 2, false, true, false},
		{14, "Dtype(14)", 0, false, false, false},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.name {
			t.Errorf("Dtype(%d).String() = %q; want %q", uint8(tt.d), got, tt.name)
		}
		if got := tt.d.Size(); got != tt.size {
			t.Errorf("%v.Size() = %d; want %d", tt.d, got, tt.size)
		}
		if got := tt.d.IsSource(); got != tt.source {
			t.Errorf("%v.IsSource() = %v; want %v", tt.d, got, tt.source)
		}
		if got := tt.d.IsOutput(); got != tt.output {
			t.Errorf("%v.IsOutput() = %v; want %v", tt.d, got, tt.output)
		}
		if got := tt.d.IsInteger(); got != tt.integer {
			t.Errorf("%v.IsInteger() = %v; want %v", tt.d, got, tt.integer)
		}
	}
}
