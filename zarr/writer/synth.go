package writer

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/damacy-go/damacy/zarr"
)

// Synth generates deterministic synthetic data for an array: each element
// depends only on the fields and the element's coordinates, never on how
// the array is split into boxes or goroutines, so a dataset is the same
// whichever way it is generated. Its value is, in order:
//
//   - a smooth field: a sum of triangle waves along each axis (periods of
//     16 to 128 elements, chosen by Seed), scaled to Amplitude of the data
//     type's range ([0, max] for unsigned types, [-max, max] for signed
//     ones, [-1, 1] for floats, "above zero" for bool);
//   - with NoiseBits > 0, its low NoiseBits bits replaced by random bits
//     (the low mantissa bits of a float, which at most doubles its
//     magnitude);
//   - with probability RandomFraction, replaced entirely by a uniformly
//     random value (over the type's whole range for integers, in [-1, 1)
//     for floats).
//
// damacy's benchmark data ("entropy 0.5": half the voxels random, the rest
// 0) is Synth{RandomFraction: 0.5}; a smooth, compressible image with 4
// noisy bits is Synth{Amplitude: 0.5, NoiseBits: 4}. The arithmetic is
// integer or single IEEE operations, so the bytes are the same on every
// platform.
type Synth struct {
	// Seed selects the random bits and the field's periods and phases.
	Seed uint64
	// DataType is the element type generated.
	DataType zarr.DataType
	// Shape is the whole array's shape; elements are numbered in C order
	// within it to seed their random bits.
	Shape []int64
	// Amplitude is the smooth field's amplitude as a fraction of the type's
	// range, in [0, 1]. Zero makes the field 0 (false).
	Amplitude float64
	// NoiseBits is the number of low bits made random: up to the type's
	// width for integers, its mantissa width for floats (10, 23, 52), 1 for
	// bool.
	NoiseBits int
	// RandomFraction is the fraction of elements drawn uniformly, in [0, 1].
	RandomFraction float64
}

// fieldT is the amplitude of one axis's wave, in integer field units: a
// wave takes values in [-fieldT, fieldT].
const fieldT = 1 << 20

// check validates s.
func (s *Synth) check() (typeInfo, error) {
	ti, ok := infoOf(s.DataType)
	if !ok {
		return ti, specErr("Synth.DataType", "unknown data type %d", uint8(s.DataType))
	}
	if len(s.Shape) < 1 || len(s.Shape) > maxRank {
		return ti, specErr("Synth.Shape", "has %d dimensions; want 1 to %d", len(s.Shape), maxRank)
	}
	if err := checkShape("Synth.Shape", s.Shape, len(s.Shape), 1, math.MaxInt64); err != nil {
		return ti, err
	}
	if !(s.Amplitude >= 0 && s.Amplitude <= 1) {
		return ti, specErr("Synth.Amplitude", "%v is outside [0, 1]", s.Amplitude)
	}
	maxBits := 8 * ti.size
	switch ti.kind {
	case kindFloat:
		maxBits = ti.mant
	case kindBool:
		maxBits = 1
	}
	if s.NoiseBits < 0 || s.NoiseBits > maxBits {
		return ti, specErr("Synth.NoiseBits", "%d is outside 0..%d for %v", s.NoiseBits, maxBits, s.DataType)
	}
	if !(s.RandomFraction >= 0 && s.RandomFraction <= 1) {
		return ti, specErr("Synth.RandomFraction", "%v is outside [0, 1]", s.RandomFraction)
	}
	return ti, nil
}

// Fill writes the elements of box into dst, C order, little-endian. box must
// lie inside Shape and dst must be exactly its size. Fill may be called
// from several goroutines at once, and has the signature WriteFrom takes.
func (s *Synth) Fill(dst []byte, box []zarr.Range) error {
	ti, err := s.check()
	if err != nil {
		return err
	}
	rank := len(s.Shape)
	if len(box) != rank {
		return fmt.Errorf("writer: synth box has %d dimensions; Shape has %d: %w", len(box), rank, ErrInvalid)
	}
	for d, r := range box {
		if r.Start < 0 || r.Stop > s.Shape[d] || r.Start >= r.Stop {
			return fmt.Errorf("writer: synth box [%d, %d) in dimension %d is not inside [0, %d): %w", r.Start, r.Stop, d, s.Shape[d], ErrInvalid)
		}
	}
	if n := boxBytes(box, ti.size); len(dst) != n {
		return fmt.Errorf("writer: synth buffer is %d bytes; the box needs %d: %w", len(dst), n, ErrInvalid)
	}
	g := newSynthGen(s, ti)
	idx := make([]int64, rank) // coordinates of the row's first element
	for d, r := range box {
		idx[d] = r.Start
	}
	last := box[rank-1]
	row := int(last.Stop-last.Start) * ti.size
	for o := 0; o < len(dst); o += row {
		var lin int64
		base := int64(0)
		for d := range rank - 1 {
			lin = lin*s.Shape[d] + idx[d]
			base += g.wave(d, idx[d])
		}
		lin = lin*s.Shape[rank-1] + last.Start
		g.row(dst[o:o+row], base, lin, last.Start)
		for d := rank - 2; d >= 0; d-- {
			if idx[d]++; idx[d] < box[d].Stop {
				break
			}
			idx[d] = box[d].Start
		}
	}
	return nil
}

// synthGen holds a Synth's per-call constants.
type synthGen struct {
	ti            typeInfo
	seed          uint64
	period, phase []int64
	// fieldMax is the largest magnitude of the field: the sum of one wave
	// per axis.
	fieldMax   int64
	scale      float64 // field value -> element value
	noise      uint64  // mask of the random low bits
	threshold  uint64  // r>>11 below this: a uniformly random element
	maxF       float64 // the largest integer as float64: saturate at or above it
	amplitude  bool    // the field is not all zero
	needRandom bool
}

func newSynthGen(s *Synth, ti typeInfo) *synthGen {
	g := &synthGen{
		ti:        ti,
		seed:      s.Seed,
		period:    make([]int64, len(s.Shape)),
		phase:     make([]int64, len(s.Shape)),
		fieldMax:  int64(len(s.Shape)) * fieldT,
		noise:     1<<s.NoiseBits - 1,
		threshold: uint64(s.RandomFraction * (1 << 53)),
		amplitude: s.Amplitude > 0,
	}
	for d := range s.Shape {
		h := mix(s.Seed ^ uint64(d+1)*0x9e3779b97f4a7c15)
		g.period[d] = 16 << (h % 4)
		g.phase[d] = int64(h>>8) % g.period[d]
	}
	r := float64(g.fieldMax)
	switch ti.kind {
	case kindUint:
		g.maxF = float64(ti.maxUint())
		g.scale = float64(s.Amplitude*g.maxF) / (2 * r)
	case kindInt:
		g.maxF = float64(ti.maxInt())
		g.scale = float64(s.Amplitude*g.maxF) / r
	case kindFloat:
		g.scale = s.Amplitude / r
	}
	g.needRandom = s.NoiseBits > 0 || g.threshold > 0
	return g
}

// wave is axis d's triangle wave at x, in [-fieldT, fieldT].
func (g *synthGen) wave(d int, x int64) int64 {
	p := g.period[d]
	tri := 2*((x+g.phase[d])%p) - p // in [-p, p)
	if tri < 0 {
		tri = -tri
	}
	return tri*(2*fieldT/p) - fieldT
}

// row fills one row of elements: base is the sum of the waves of the other
// axes, lin the linear index of the first element and x its coordinate
// along the last axis.
func (g *synthGen) row(dst []byte, base, lin, x int64) {
	size := g.ti.size
	last := len(g.period) - 1
	p := g.period[last]
	step := 2 * fieldT / p
	pos := (x + g.phase[last]) % p // the last axis's wave, stepped without dividing
	for o := 0; o < len(dst); o, lin = o+size, lin+1 {
		tri := 2*pos - p
		if tri < 0 {
			tri = -tri
		}
		if pos++; pos == p {
			pos = 0
		}
		v := g.field(base + tri*step - fieldT)
		if g.needRandom {
			// The splitmix64 sequence of Seed, two draws per element.
			r1 := mix(g.seed + uint64(2*lin+1)*0x9e3779b97f4a7c15)
			r2 := mix(g.seed + uint64(2*lin+2)*0x9e3779b97f4a7c15)
			if r1>>11 < g.threshold {
				v = g.uniform(r2)
			} else {
				v = v&^g.noise | r2&g.noise
			}
		}
		switch size {
		case 1:
			dst[o] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(dst[o:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(dst[o:], uint32(v))
		default:
			binary.LittleEndian.PutUint64(dst[o:], v)
		}
	}
}

// field maps a field value t in [-fieldMax, fieldMax] to an element's bits.
func (g *synthGen) field(t int64) uint64 {
	if !g.amplitude {
		return 0 // 0, 0.0 or false
	}
	ti := g.ti
	switch ti.kind {
	case kindBool:
		if t > 0 {
			return 1
		}
		return 0
	case kindUint:
		// Non-negative: rounding is adding a half and truncating. The
		// conversion keeps the multiply and the add two roundings, so no
		// platform fuses them.
		f := float64(float64(t+g.fieldMax)*g.scale) + 0.5
		if f >= g.maxF {
			return ti.maxUint()
		}
		return uint64(f)
	case kindInt:
		// |f| <= maxF; only int64's maxF, 2^63, does not convert.
		f := math.Round(float64(t) * g.scale)
		if f >= g.maxF {
			return uint64(ti.maxInt()) & ti.mask()
		}
		return uint64(int64(f)) & ti.mask()
	}
	return ti.fromFloat64(float64(t) * g.scale)
}

// uniform maps random bits to a uniformly random element.
func (g *synthGen) uniform(r uint64) uint64 {
	switch g.ti.kind {
	case kindBool:
		return r & 1
	case kindFloat:
		return g.ti.fromFloat64(float64(int64(r>>11)-1<<52) / (1 << 52))
	}
	return r & g.ti.mask()
}

// mix is splitmix64's output function.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
