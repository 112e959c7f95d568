package ptx

import (
	"fmt"
	"math"
	"strconv"
)

// intRange returns the smallest and largest value of an integer type (or
// Bool). Uint64's range is cut at math.MaxInt64, which is all that the
// output types can hold.
func intRange(d Dtype) (lo, hi int64) {
	switch d {
	case Bool:
		return 0, 1
	case Int8:
		return math.MinInt8, math.MaxInt8
	case Int16:
		return math.MinInt16, math.MaxInt16
	case Int32:
		return math.MinInt32, math.MaxInt32
	case Int64:
		return math.MinInt64, math.MaxInt64
	case Uint8:
		return 0, math.MaxUint8
	case Uint16:
		return 0, math.MaxUint16
	case Uint32:
		return 0, math.MaxUint32
	case Uint64:
		return 0, math.MaxInt64
	}
	return 0, -1
}

// intValue returns the element of type d whose value bits are v (as
// Float32Bits takes them) as an integer, and whether it is one: bool is 0
// or 1, integers are themselves (a uint64 above math.MaxInt64 is not one),
// and a float is one when it is finite, integral and in [-2^63, 2^63).
// Where it is not, the integer is what the assemble kernel computes all
// the same: a uint64's bits, or 0 for a float.
func intValue(d Dtype, v uint64) (int64, bool) {
	switch d {
	case Bool:
		if uint8(v) != 0 {
			return 1, true
		}
		return 0, true
	case Int8:
		return int64(int8(v)), true
	case Int16:
		return int64(int16(v)), true
	case Int32:
		return int64(int32(v)), true
	case Int64:
		return int64(v), true
	case Uint8:
		return int64(uint8(v)), true
	case Uint16:
		return int64(uint16(v)), true
	case Uint32:
		return int64(uint32(v)), true
	case Uint64:
		return int64(v), v <= math.MaxInt64
	case Float16:
		return floatInt(float64(math.Float32frombits(halfToFloatBits(uint16(v)))))
	case Float32:
		return floatInt(float64(math.Float32frombits(uint32(v))))
	case Float64:
		return floatInt(math.Float64frombits(v))
	}
	return 0, false
}

// floatInt returns f as an integer if it is finite, integral and in
// [-2^63, 2^63), else 0 and false (as the kernel's float_to_int).
func floatInt(f float64) (int64, bool) {
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// IntBits converts an element of type src, whose value bits are v (see
// Float32Bits), to the integer output type out, as the assemble kernel
// does: it returns the output element's bits (its low out.Size() bytes
// hold them) and whether the value fits. A value fits when it is an
// integer (bool is 0 or 1; a float must be finite and integral) within
// out's range; one that does not is a misfit, never wrapped or rounded,
// and the bits returned for it are what the kernel writes (of no use but
// to compare the kernel with the host). It returns 0, false when out is
// not an integer output type.
func IntBits(out, src Dtype, v uint64) (uint64, bool) {
	if !out.IsInteger() || !out.IsOutput() {
		return 0, false
	}
	x, ok := intValue(src, v)
	lo, hi := intRange(out)
	bits := uint64(x)
	if n := out.Size(); n < 8 {
		bits &= 1<<(8*n) - 1
	}
	return bits, ok && x >= lo && x <= hi
}

// NeedsCheck reports whether some element of type src does not fit the
// output type out: always false for a float output, and for an integer
// output false only when out holds every value of src (bool into any
// integer, uint8 into int16, int32 into int64...). Floats and uint64
// always need the check. The assemble kernel counts misfits only where
// the launch gives it a MisfitStatus; a Plan whose ops all read sources
// that need no check (Plan.NeedsCheck) needs none.
func NeedsCheck(src, out Dtype) bool {
	if !out.IsInteger() || !src.IsSource() {
		return false
	}
	switch src {
	case Float16, Float32, Float64, Uint64:
		return true
	}
	slo, shi := intRange(src)
	olo, ohi := intRange(out)
	return slo < olo || shi > ohi
}

// FillFor returns the Op.Fill that makes a fill op of output type out
// write an array's fill value, given as value bits v of the array's type
// src (as Float32Bits takes them). For a float output it is Float32Bits(src,
// v). For an integer output it is the value converted as IntBits converts
// elements, as its low 32 bits (see Op.Fill); a fill that does not fit
// out, or that lies outside the int32 range for an Int64 output, is an
// error wrapping ErrInvalid.
func FillFor(out, src Dtype, v uint64) (uint32, error) {
	if !out.IsOutput() || !src.IsSource() {
		return 0, fmt.Errorf("ptx: fill of %v into %v: %w", src, out, ErrInvalid)
	}
	if !out.IsInteger() {
		return Float32Bits(src, v), nil
	}
	x, ok := intValue(src, v)
	lo, hi := intRange(out)
	if out == Int64 {
		lo, hi = math.MinInt32, math.MaxInt32
	}
	if !ok || x < lo || x > hi {
		return 0, fmt.Errorf("ptx: fill value %s (%v) does not fit a fill of %v, which holds [%d, %d]: %w", formatValue(src, v), src, out, lo, hi, ErrInvalid)
	}
	return uint32(x), nil
}

// fillFits reports whether Op.Fill fill is valid for output type out: any
// bits for a float output; for an integer output, the low 32 bits of a
// value of out's range (sign-extended for signed types).
func fillFits(out Dtype, fill uint32) bool {
	switch out {
	case Int8:
		return int32(fill) >= math.MinInt8 && int32(fill) <= math.MaxInt8
	case Int16:
		return int32(fill) >= math.MinInt16 && int32(fill) <= math.MaxInt16
	case Uint8:
		return fill <= math.MaxUint8
	case Uint16:
		return fill <= math.MaxUint16
	}
	return true
}

// fillInt returns the integer an integer output's fill op writes.
func fillInt(fill uint32) int64 { return int64(int32(fill)) }

// formatValue formats value bits v of type d (see Float32Bits) as the
// value they stand for.
func formatValue(d Dtype, v uint64) string {
	switch d {
	case Bool:
		return strconv.FormatBool(uint8(v) != 0)
	case Int8, Int16, Int32, Int64:
		x, _ := intValue(d, v)
		return strconv.FormatInt(x, 10)
	case Uint8, Uint16, Uint32:
		x, _ := intValue(d, v)
		return strconv.FormatInt(x, 10)
	case Uint64:
		return strconv.FormatUint(v, 10)
	case Float16, Float32:
		return strconv.FormatFloat(float64(math.Float32frombits(Float32Bits(d, v))), 'g', -1, 32)
	case Float64:
		return strconv.FormatFloat(math.Float64frombits(v), 'g', -1, 64)
	}
	return fmt.Sprintf("%#x", v)
}
