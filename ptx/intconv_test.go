package ptx

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"slices"
	"testing"
)

// outputInts are the integer output types.
var outputInts = []Dtype{Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32}

// exactValue returns the value that value bits v of type d stand for,
// exactly, and false for NaN and the infinities.
func exactValue(d Dtype, v uint64) (*big.Float, bool) {
	switch d {
	case Bool:
		if uint8(v) != 0 {
			return big.NewFloat(1), true
		}
		return big.NewFloat(0), true
	case Int8, Int16, Int32, Int64:
		shift := 64 - 8*d.Size()
		return new(big.Float).SetInt64(int64(v<<shift) >> shift), true
	case Uint8, Uint16, Uint32, Uint64:
		if d.Size() < 8 {
			v &= 1<<(8*d.Size()) - 1
		}
		return new(big.Float).SetUint64(v), true
	}
	f := math.Float64frombits(v)
	if d != Float64 {
		f = float64(math.Float32frombits(Float32Bits(d, v)))
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	return big.NewFloat(f), true
}

// edgeValues returns value bits of type d around the edges of every
// integer output type: each edge, one step either side where d holds it,
// halves and the float specials.
func edgeValues(d Dtype) []uint64 {
	var vals []uint64
	add := func(x float64) {
		switch d {
		case Float16:
			f := float32(x)
			if float64(f) == x {
				if h := halfOf(f); float64(math.Float32frombits(halfToFloatBits(h))) == x {
					vals = append(vals, uint64(h))
				}
			}
		case Float32:
			vals = append(vals, uint64(math.Float32bits(float32(x))))
		case Float64:
			vals = append(vals, math.Float64bits(x))
		default:
			lo, hi := intRange(d)
			if x == math.Trunc(x) && x >= float64(lo) && x <= float64(hi) && x >= -(1<<63) && x < 1<<63 {
				vals = append(vals, uint64(int64(x)))
			}
			if d == Uint64 && x >= 1<<63 && x < 1<<64 {
				vals = append(vals, uint64(x))
			}
		}
	}
	for _, out := range outputInts {
		lo, hi := intRange(out)
		for _, x := range []float64{float64(lo), float64(hi)} {
			add(x)
			add(x - 1)
			add(x + 1)
			add(math.Nextafter(x, math.Inf(1)))
			add(math.Nextafter(x, math.Inf(-1)))
		}
	}
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, -0.5, 1.5, 1 << 63, -(1 << 63), 1 << 64, 1e300,
		math.Inf(1), math.Inf(-1), math.NaN(), math.SmallestNonzeroFloat64} {
		add(x)
	}
	switch d {
	case Bool:
		vals = append(vals, 0, 1, 2, 0xff, 0x100)
	case Uint64:
		vals = append(vals, math.MaxUint64, 1<<63, 1<<63-1)
	case Int64:
		vals = append(vals, 1<<63, 1<<63-1)
	case Float16:
		vals = append(vals, 0x7c00, 0xfc00, 0x7e01, 0x3800, 0x0001, 0x7bff, 0xfbff) // Inf, -Inf, NaN, 0.5, subnormal, ±65504
	case Float32:
		vals = append(vals, 0x7fa00001, 0xff800000, 0x00000001)
	}
	return vals
}

// TestIntBits checks the conversion into every integer output type of
// every source type's edge values against exact arithmetic: a value fits
// when it is finite, integral and in range, and then becomes itself.
func TestIntBits(t *testing.T) {
	for d := Bool; d <= Float64; d++ {
		for _, out := range outputInts {
			lo, hi := intRange(out)
			blo, bhi := new(big.Float).SetInt64(lo), new(big.Float).SetInt64(hi)
			fits, misfits := 0, 0
			defer func() {
				if fits == 0 || (misfits > 0) != NeedsCheck(d, out) {
					t.Errorf("%v into %v: %d edge values fit, %d do not", d, out, fits, misfits)
				}
			}()
			for _, v := range edgeValues(d) {
				x, finite := exactValue(d, v)
				wantOK := finite && x.IsInt() && x.Cmp(blo) >= 0 && x.Cmp(bhi) <= 0
				got, ok := IntBits(out, d, v)
				if ok != wantOK {
					t.Errorf("IntBits(%v, %v, %#x (%s)) fits = %v; want %v", out, d, v, formatValue(d, v), ok, wantOK)
					continue
				}
				if !ok {
					misfits++
					continue
				}
				fits++
				i, _ := x.Int64()
				want := uint64(i)
				if out.Size() < 8 {
					want &= 1<<(8*out.Size()) - 1
				}
				if got != want {
					t.Errorf("IntBits(%v, %v, %#x) = %#x; want %#x", out, d, v, got, want)
				}
			}
		}
	}
	if _, ok := IntBits(Float32, Int8, 1); ok {
		t.Error("IntBits into float32 fits")
	}
	if _, ok := IntBits(Uint64, Int8, 1); ok {
		t.Error("IntBits into uint64 (not an output type) fits")
	}
}

// TestNeedsCheck compares NeedsCheck with a search for a misfit among the
// source type's edge values.
func TestNeedsCheck(t *testing.T) {
	for d := Bool; d <= Float64; d++ {
		for _, out := range append(slices.Clone(outputInts), Float32, BFloat16) {
			misfit := false
			if out.IsInteger() {
				for _, v := range edgeValues(d) {
					if _, ok := IntBits(out, d, v); !ok {
						misfit = true
					}
				}
			}
			if got := NeedsCheck(d, out); got != misfit {
				t.Errorf("NeedsCheck(%v, %v) = %v; a misfit among the edge values: %v", d, out, got, misfit)
			}
		}
	}
}

// TestFillFor checks the conversion of array fill values into Op.Fill and
// its refusals, and that Plan.Fill and AssembleHost refuse fills out of
// an integer output's range.
func TestFillFor(t *testing.T) {
	tests := []struct {
		out, src Dtype
		v        uint64
		fill     uint32
		ok       bool
	}{
		{Float32, Uint16, 7, 0x40e00000, true},
		{BFloat16, Float64, math.Float64bits(-2), 0xc0000000, true},
		{Uint8, Uint16, 255, 255, true},
		{Uint8, Uint16, 256, 0, false},
		{Uint8, Int8, 0xff, 0, false}, // -1
		{Int8, Int16, 0xff80, 0xffffff80, true},
		{Int16, Float32, uint64(math.Float32bits(-3)), 0xfffffffd, true},
		{Int16, Float32, uint64(math.Float32bits(0.5)), 0, false},
		{Int32, Float64, math.Float64bits(math.NaN()), 0, false},
		{Uint32, Uint64, math.MaxUint32, math.MaxUint32, true},
		{Int64, Int64, uint64(math.MaxInt32), math.MaxInt32, true},
		{Int64, Int64, 1 << 31, 0, false}, // an int64 output's fill lies in the int32 range
		{Int64, Int64, uint64(1<<64 - 1<<31), 0x80000000, true},
		{Int32, Bool, 1, 1, true},
		{Uint64, Uint8, 1, 0, false},
	}
	for _, tt := range tests {
		fill, err := FillFor(tt.out, tt.src, tt.v)
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, ErrInvalid) || err == nil && fill != tt.fill {
			t.Errorf("FillFor(%v, %v, %#x) = %#x, %v; want %#x, ok %v", tt.out, tt.src, tt.v, fill, err, tt.fill, tt.ok)
		}
	}

	for _, tt := range []struct {
		out  Dtype
		fill uint32
		ok   bool
	}{
		{Uint8, 255, true}, {Uint8, 256, false}, {Int8, 0xffffff80, true}, {Int8, 0x80, false},
		{Int16, 0xffff8000, true}, {Int16, 0x8000, false}, {Uint16, 0xffff, true}, {Uint16, 0x10000, false},
		{Int32, 0xffffffff, true}, {Uint32, 0xffffffff, true}, {Int64, 0x80000000, true}, {Float32, 0xffffffff, true},
	} {
		l := Layout{Samples: 1, Shape: []int{3}, Dtype: tt.out}
		p, err := NewPlan(l)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Fill(0, []int{0}, []int{3}, tt.fill)
		var opErr *OpError
		if tt.ok != (err == nil) || err != nil && (!errors.As(err, &opErr) || opErr.Field != "Fill") {
			t.Errorf("%v plan: Fill(%#x) = %v; want ok %v or an *OpError on Fill", tt.out, tt.fill, err, tt.ok)
		}
		op := Op{Extent: [MaxRank]uint32{3}, Fill: tt.fill}
		err = AssembleHost(make([]byte, l.Bytes()), l, nil, []Op{op}, nil, 1)
		if tt.ok != (err == nil) || err != nil && (!errors.As(err, &opErr) || opErr.Field != "Fill") {
			t.Errorf("%v: AssembleHost of a fill %#x = %v; want ok %v or an *OpError on Fill", tt.out, tt.fill, err, tt.ok)
		}
	}
}

// TestMisfitStatus checks the decoding of the kernel's status bytes and
// the error made of them.
func TestMisfitStatus(t *testing.T) {
	b := make([]byte, MisfitStatusSize)
	e := binary.NativeEndian
	e.PutUint64(b[0:], 17)
	e.PutUint64(b[8:], ^uint64(3<<32|(1*6+2)*7+5))
	e.PutUint64(b[16:], 0xfffb) // int16 -5
	e.PutUint32(b[24:], uint32(Int16))
	st, err := DecodeMisfitStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	if s, i, ok := st.Position(); s != 3 || i != (1*6+2)*7+5 || !ok {
		t.Errorf("Position() = %d, %d, %v; want 3, %d, true", s, i, ok, (1*6+2)*7+5)
	}
	l := Layout{Samples: 4, Shape: []int{5, 6, 7}, Dtype: Uint8}
	err = st.Err(l)
	var me *MisfitError
	if !errors.As(err, &me) || !errors.Is(err, ErrMisfit) || me.Sample != 3 || !slices.Equal(me.Index, []int{1, 2, 5}) ||
		me.Count != 17 || me.Src != Int16 || me.Value != 0xfffb || me.Out != Uint8 {
		t.Fatalf("Err = %#v", err)
	}
	if want := "ptx: sample 3 at [1 2 5]: int16 value -5 does not fit uint8 (17 elements do not)"; err.Error() != want {
		t.Errorf("message %q; want %q", err.Error(), want)
	}
	var none MisfitStatus
	if err := none.Err(l); err != nil {
		t.Errorf("zero status: %v", err)
	}
	if _, err := DecodeMisfitStatus(b[:8]); !errors.Is(err, ErrInvalid) {
		t.Errorf("short status: %v", err)
	}
}
