package writer

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/damacy-go/damacy/zarr"
)

// TestSynthPartition checks that Synth's bytes do not depend on how the
// array is split into boxes.
func TestSynthPartition(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 4))
	for _, dt := range allTypes {
		ti, _ := infoOf(dt)
		shape := []int64{7, 1 + rng.Int64N(40), 1 + rng.Int64N(40)}
		s := &Synth{Seed: rng.Uint64(), DataType: dt, Shape: shape, Amplitude: rng.Float64(),
			NoiseBits: rng.IntN(2), RandomFraction: rng.Float64() / 2}
		whole := make([]byte, int(product(shape))*ti.size)
		if err := s.Fill(whole, fullBox(shape)); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			box := make([]zarr.Range, 3)
			for d, n := range shape {
				box[d].Start = rng.Int64N(n)
				box[d].Stop = box[d].Start + 1 + rng.Int64N(n-box[d].Start)
			}
			part := make([]byte, boxBytes(box, ti.size))
			if err := s.Fill(part, box); err != nil {
				t.Fatal(err)
			}
			if want := expected(whole, shape, box, ti.size, 0); !bytes.Equal(part, want) {
				t.Fatalf("%v: Fill(%v) differs from the same box of the whole array", dt, box)
			}
		}
	}
}

// synthStats generates n elements along one axis and returns them as
// float64s (bit patterns of integers, values of floats).
func synthStats(t *testing.T, s *Synth) []float64 {
	t.Helper()
	ti, _ := infoOf(s.DataType)
	buf := make([]byte, int(product(s.Shape))*ti.size)
	if err := s.Fill(buf, fullBox(s.Shape)); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, 0, product(s.Shape))
	for i := 0; i < len(buf); i += ti.size {
		v := load(buf[i:], ti.size)
		switch ti.kind {
		case kindFloat:
			out = append(out, ti.toFloat64(v))
		case kindInt:
			out = append(out, float64(ti.signExtend(v)))
		default:
			out = append(out, float64(v))
		}
	}
	return out
}

// TestSynthKnobs checks what each knob does.
func TestSynthKnobs(t *testing.T) {
	seed := testSeed(t)
	shape := []int64{64, 256}
	// damacy's data: about half the elements random, the rest zero.
	vals := synthStats(t, &Synth{Seed: seed, DataType: zarr.Uint16, Shape: shape, RandomFraction: 0.5})
	zeros := 0
	for _, v := range vals {
		if v == 0 {
			zeros++
		}
	}
	if frac := float64(zeros) / float64(len(vals)); math.Abs(frac-0.5) > 0.02 {
		t.Errorf("RandomFraction 0.5: %.3f of the elements are zero; want about 0.5", frac)
	}
	// Amplitude alone: a smooth field spanning most of [0, Amplitude*max].
	vals = synthStats(t, &Synth{Seed: seed, DataType: zarr.Uint16, Shape: shape, Amplitude: 0.5})
	lo, hi, jump := math.Inf(1), math.Inf(-1), 0.0
	for i, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
		if i%256 != 0 {
			jump = max(jump, math.Abs(v-vals[i-1]))
		}
	}
	if lo < 0 || hi > 0.5*65535+1 || hi-lo < 0.25*65535 || jump > 0.5*65535/8 {
		t.Errorf("Amplitude 0.5: values in [%v, %v], largest step %v; want a smooth field within [0, 32768]", lo, hi, jump)
	}
	// NoiseBits: only the low bits change.
	plain := synthStats(t, &Synth{Seed: seed, DataType: zarr.Int32, Shape: shape, Amplitude: 0.9})
	noisy := synthStats(t, &Synth{Seed: seed, DataType: zarr.Int32, Shape: shape, Amplitude: 0.9, NoiseBits: 5})
	changed := 0
	for i := range plain {
		a, b := int64(plain[i]), int64(noisy[i])
		if a>>5 != b>>5 {
			t.Fatalf("NoiseBits 5 changed element %d beyond its low bits: %d -> %d", i, a, b)
		}
		if a != b {
			changed++
		}
	}
	if changed < len(plain)*9/10 {
		t.Errorf("NoiseBits 5 changed %d of %d elements", changed, len(plain))
	}
	// Floats stay finite: within [-1, 1] before noise, which may at most
	// double a magnitude.
	for _, dt := range []zarr.DataType{zarr.Float16, zarr.Float32, zarr.Float64} {
		ti, _ := infoOf(dt)
		for _, v := range synthStats(t, &Synth{Seed: seed, DataType: dt, Shape: shape, Amplitude: 1, NoiseBits: ti.mant, RandomFraction: 0.3}) {
			if !(math.Abs(v) < 2) {
				t.Fatalf("%v: value %v outside (-2, 2)", dt, v)
			}
		}
	}
	// Another seed gives other data.
	a := synthStats(t, &Synth{Seed: seed, DataType: zarr.Uint8, Shape: shape, RandomFraction: 1})
	b := synthStats(t, &Synth{Seed: seed + 1, DataType: zarr.Uint8, Shape: shape, RandomFraction: 1})
	same := 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
	}
	if same > len(a)/100 {
		t.Errorf("seeds %d and %d agree on %d of %d random bytes", seed, seed+1, same, len(a))
	}
}

// TestSynthGolden pins a few generated values, so that a change to the
// generator (which would silently change every generated dataset) shows.
func TestSynthGolden(t *testing.T) {
	s := &Synth{Seed: 42, DataType: zarr.Uint16, Shape: []int64{4, 8}, Amplitude: 0.5, NoiseBits: 3, RandomFraction: 0.25}
	buf := make([]byte, 64)
	if err := s.Fill(buf, fullBox(s.Shape)); err != nil {
		t.Fatal(err)
	}
	const want = "0330043806dba42f0640be50073002281d9e60b8013c014411e50734032c06240628033041db0440013801300228d770072c00345b8f4bd4023c0234062c0224"
	if got := hex.EncodeToString(buf); got != want {
		t.Errorf("Synth %+v = %s; want %s", s, got, want)
	}
}

var badSynthTests = []struct {
	s     Synth
	field string
}{
	{Synth{DataType: 0, Shape: []int64{4}}, "Synth.DataType"},
	{Synth{DataType: zarr.Int8}, "Synth.Shape"},
	{Synth{DataType: zarr.Int8, Shape: []int64{4, 0}}, "Synth.Shape"},
	{Synth{DataType: zarr.Int8, Shape: []int64{4}, Amplitude: 1.5}, "Synth.Amplitude"},
	{Synth{DataType: zarr.Int8, Shape: []int64{4}, Amplitude: math.NaN()}, "Synth.Amplitude"},
	{Synth{DataType: zarr.Int8, Shape: []int64{4}, NoiseBits: 9}, "Synth.NoiseBits"},
	{Synth{DataType: zarr.Float32, Shape: []int64{4}, NoiseBits: 24}, "Synth.NoiseBits"},
	{Synth{DataType: zarr.Bool, Shape: []int64{4}, NoiseBits: 2}, "Synth.NoiseBits"},
	{Synth{DataType: zarr.Int8, Shape: []int64{4}, RandomFraction: -0.1}, "Synth.RandomFraction"},
}

func TestBadSynth(t *testing.T) {
	for _, tt := range badSynthTests {
		err := tt.s.Fill(make([]byte, 4), []zarr.Range{rg(0, 4)})
		var se *SpecError
		if !errors.As(err, &se) || se.Field != tt.field {
			t.Errorf("Fill with %+v = %v; want a *SpecError for %s", tt.s, err, tt.field)
		}
	}
	s := &Synth{DataType: zarr.Uint16, Shape: []int64{4, 4}}
	for _, c := range []struct {
		box []zarr.Range
		n   int
	}{
		{[]zarr.Range{rg(0, 4)}, 8},
		{[]zarr.Range{rg(0, 4), rg(2, 5)}, 24},
		{[]zarr.Range{rg(-1, 4), rg(0, 4)}, 40},
		{[]zarr.Range{rg(1, 1), rg(0, 4)}, 0},
		{[]zarr.Range{rg(0, 4), rg(0, 4)}, 31},
	} {
		if err := s.Fill(make([]byte, c.n), c.box); !errors.Is(err, ErrInvalid) {
			t.Errorf("Fill(%d bytes, %v) = %v; want ErrInvalid", c.n, c.box, err)
		}
	}
}
