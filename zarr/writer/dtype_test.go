package writer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFloat16Exhaustive converts every half-precision pattern to float64
// and back.
func TestFloat16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := float16ToFloat64(uint16(h))
		back := float16FromFloat64(f)
		if math.IsNaN(f) {
			// NaNs come back quiet, with the sign and the payload's top bits.
			if want := uint16(h) | 0x200; back != want {
				t.Errorf("NaN %#04x -> %#04x; want %#04x", h, back, want)
			}
			continue
		}
		if back != uint16(h) {
			t.Errorf("%#04x -> %v -> %#04x", h, f, back)
		}
		// Widening to float32 must agree with Go's own conversion.
		if h&0x7c00 != 0x7c00 && float64(float32(f)) != f {
			t.Errorf("%#04x -> %v is not exact in float32", h, f)
		}
	}
}

// TestFloat16Rounding checks rounding to nearest, ties to even, against the
// two neighbouring half values of random float64s, including midpoints,
// subnormals and overflow.
func TestFloat16Rounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	check := func(f float64) {
		h := float16FromFloat64(f)
		got := float16ToFloat64(h)
		if math.Abs(f) >= 65520 { // the midpoint between the largest half and 2^16
			if !math.IsInf(got, 0) || math.Signbit(got) != math.Signbit(f) {
				t.Errorf("%v -> %v; want infinity", f, got)
			}
			return
		}
		// The neighbours of the result must not be nearer to f.
		mag := h & 0x7fff
		for _, n := range []uint16{mag - 1, mag + 1} {
			if n > 0x7bff || mag == 0 && n == 0xffff {
				continue
			}
			other := math.Copysign(float16ToFloat64(n), f)
			dg, do := math.Abs(got-f), math.Abs(other-f)
			if do < dg || do == dg && n&1 == 0 {
				t.Errorf("%v -> %#04x (%v); %#04x (%v) is nearer or the even tie", f, h, got, n, other)
			}
		}
		if got != 0 && math.Signbit(got) != math.Signbit(f) || got == 0 && math.Signbit(got) != math.Signbit(f) {
			t.Errorf("%v -> %v has the wrong sign", f, got)
		}
	}
	for range 100000 {
		h := uint16(rng.IntN(0x7c00))
		a, b := float16ToFloat64(h), float16ToFloat64(h+1)
		if h == 0x7bff {
			b = 65536
		}
		check(a + (b-a)*rng.Float64())
		check(-(a + (b-a)*rng.Float64()))
		check((a + b) / 2)
		check(-(a + b) / 2)
	}
	for _, f := range []float64{0, 5e-324, 1e-10, 2.9802322387695312e-08, 2.980232238769532e-08, 65504, 65519.99, 65520, 1e300} {
		check(f)
		check(-f)
	}
}
