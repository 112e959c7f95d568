package writer

import (
	"math"

	"github.com/damacy-go/damacy/zarr"
)

// kind is how the writer treats a data type's bit pattern.
type kind uint8

const (
	kindBool kind = iota
	kindInt
	kindUint
	kindFloat
)

// typeInfo is what the writer needs to know about a zarr.DataType.
type typeInfo struct {
	kind kind
	size int // bytes per element
	// mant is the number of explicit mantissa bits of a float type.
	mant int
	// v2 is the numpy kind letter of the zarr v2 typestr ("b", "i", "u", "f").
	v2 byte
}

// infoOf returns the writer's description of t, or false when t is not a
// data type the writer knows.
func infoOf(t zarr.DataType) (typeInfo, bool) {
	switch t {
	case zarr.Bool:
		return typeInfo{kind: kindBool, size: 1, v2: 'b'}, true
	case zarr.Int8:
		return typeInfo{kind: kindInt, size: 1, v2: 'i'}, true
	case zarr.Int16:
		return typeInfo{kind: kindInt, size: 2, v2: 'i'}, true
	case zarr.Int32:
		return typeInfo{kind: kindInt, size: 4, v2: 'i'}, true
	case zarr.Int64:
		return typeInfo{kind: kindInt, size: 8, v2: 'i'}, true
	case zarr.Uint8:
		return typeInfo{kind: kindUint, size: 1, v2: 'u'}, true
	case zarr.Uint16:
		return typeInfo{kind: kindUint, size: 2, v2: 'u'}, true
	case zarr.Uint32:
		return typeInfo{kind: kindUint, size: 4, v2: 'u'}, true
	case zarr.Uint64:
		return typeInfo{kind: kindUint, size: 8, v2: 'u'}, true
	case zarr.Float16:
		return typeInfo{kind: kindFloat, size: 2, mant: 10, v2: 'f'}, true
	case zarr.Float32:
		return typeInfo{kind: kindFloat, size: 4, mant: 23, v2: 'f'}, true
	case zarr.Float64:
		return typeInfo{kind: kindFloat, size: 8, mant: 52, v2: 'f'}, true
	}
	return typeInfo{}, false
}

// mask is the all-ones bit pattern of one element.
func (ti typeInfo) mask() uint64 {
	return math.MaxUint64 >> (64 - 8*ti.size)
}

// minInt and maxInt are the range of a signed type; maxUint that of an
// unsigned one.
func (ti typeInfo) minInt() int64   { return math.MinInt64 >> (64 - 8*ti.size) }
func (ti typeInfo) maxInt() int64   { return math.MaxInt64 >> (64 - 8*ti.size) }
func (ti typeInfo) maxUint() uint64 { return ti.mask() }

// signExtend turns an element's bit pattern into its signed value.
func (ti typeInfo) signExtend(b uint64) int64 {
	s := 64 - 8*ti.size
	return int64(b<<s) >> s
}

// toFloat64 converts the bit pattern of a float element to float64, exactly.
func (ti typeInfo) toFloat64(b uint64) float64 {
	switch ti.size {
	case 2:
		return float16ToFloat64(uint16(b))
	case 4:
		return float64(math.Float32frombits(uint32(b)))
	}
	return math.Float64frombits(b)
}

// fromFloat64 rounds f to the float type (to nearest, ties to even) and
// returns its bit pattern.
func (ti typeInfo) fromFloat64(f float64) uint64 {
	switch ti.size {
	case 2:
		return uint64(float16FromFloat64(f))
	case 4:
		return uint64(math.Float32bits(float32(f)))
	}
	return math.Float64bits(f)
}

// canonicalNaN is the bit pattern zarr's "NaN" stands for: the positive quiet
// NaN with only the top mantissa bit set.
func (ti typeInfo) canonicalNaN() uint64 {
	exp := ti.mask() >> 1 &^ (1<<ti.mant - 1)
	return exp | 1<<(ti.mant-1)
}

// load reads the element at p (little-endian).
func load(p []byte, size int) uint64 {
	var v uint64
	for i := size - 1; i >= 0; i-- {
		v = v<<8 | uint64(p[i])
	}
	return v
}

// store writes the low size bytes of v at p (little-endian).
func store(p []byte, size int, v uint64) {
	for i := range size {
		p[i] = byte(v >> (8 * i))
	}
}

// float16ToFloat64 converts IEEE 754 half-precision bits to float64; every
// half value, NaN payloads included, is exactly representable.
func float16ToFloat64(h uint16) float64 {
	sign := uint64(h>>15) << 63
	exp := int(h>>10) & 0x1f
	mant := uint64(h & 0x3ff)
	switch exp {
	case 0:
		f := math.Ldexp(float64(mant), -24)
		return math.Float64frombits(math.Float64bits(f) | sign)
	case 0x1f:
		return math.Float64frombits(sign | 0x7ff<<52 | mant<<42)
	}
	return math.Float64frombits(sign | uint64(exp-15+1023)<<52 | mant<<42)
}

// float16FromFloat64 rounds f to IEEE 754 half precision, to nearest with
// ties to even; NaNs stay NaN and keep the top bits of their payload.
func float16FromFloat64(f float64) uint16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	exp := int(b>>52) & 0x7ff
	mant := b & (1<<52 - 1)
	if exp == 0x7ff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>42)&0x1ff
	}
	if exp == 0 {
		return sign // float64 subnormals are far below half's range
	}
	sig := mant | 1<<52
	e := exp - 1023
	if e >= -14 {
		m := roundShift(sig, 42) // 11 bits, the leading one included
		if m == 1<<11 {
			m >>= 1
			e++
		}
		if e > 15 {
			return sign | 0x7c00
		}
		return sign | uint16(e+15)<<10 | uint16(m&0x3ff)
	}
	// Subnormal half: units of 2^-24. A carry into bit 10 gives the smallest
	// normal, whose encoding is that same pattern.
	return sign | uint16(roundShift(sig, uint(28-e)))
}

// roundShift returns x / 2^s rounded to nearest, ties to even.
func roundShift(x uint64, s uint) uint64 {
	if s == 0 {
		return x
	}
	if s > 64 {
		return 0
	}
	q := x >> s // Go shifts of 64 or more give 0
	rem := x - q<<s
	half := uint64(1) << (s - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}
