package zarr

import (
	"fmt"
	"math"
	"strconv"
)

// DataType is the element type of an array. The zero value is not a valid
// type. Byte order is not part of it: see Endian.
type DataType uint8

// The supported data types. Bool is one byte holding 0 or 1; Float16 is an
// IEEE 754 binary16 value.
const (
	Bool DataType = iota + 1
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float16
	Float32
	Float64
)

var dataTypeNames = [...]string{
	Bool: "bool", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Uint8: "uint8", Uint16: "uint16", Uint32: "uint32", Uint64: "uint64",
	Float16: "float16", Float32: "float32", Float64: "float64",
}

var dataTypeSizes = [...]int{
	Bool: 1, Int8: 1, Int16: 2, Int32: 4, Int64: 8,
	Uint8: 1, Uint16: 2, Uint32: 4, Uint64: 8,
	Float16: 2, Float32: 4, Float64: 8,
}

// Size returns the size of one element in bytes, or 0 for an invalid type.
func (t DataType) Size() int {
	if int(t) >= len(dataTypeSizes) {
		return 0
	}
	return dataTypeSizes[t]
}

// String returns the zarr v3 name of the type ("uint16", "float32", ...).
func (t DataType) String() string {
	if t == 0 || int(t) >= len(dataTypeNames) {
		return "DataType(" + strconv.Itoa(int(t)) + ")"
	}
	return dataTypeNames[t]
}

// IsFloat reports whether t is Float16, Float32 or Float64.
func (t DataType) IsFloat() bool { return t == Float16 || t == Float32 || t == Float64 }

// IsSigned reports whether t is a signed integer type.
func (t DataType) IsSigned() bool { return t >= Int8 && t <= Int64 }

// ParseDataType returns the type with the zarr v3 name name. Other core
// zarr v3 types (complex64, complex128, raw bits "r<N>") and extension
// types fail with an error wrapping ErrUnsupported; names that are not
// types at all wrap ErrFormat.
func ParseDataType(name string) (DataType, error) {
	for t := Bool; t <= Float64; t++ {
		if dataTypeNames[t] == name {
			return t, nil
		}
	}
	if name == "" {
		return 0, fmt.Errorf("zarr: %w", malformed("empty data type"))
	}
	return 0, fmt.Errorf("zarr: %w", unsupported("data type %q", name))
}

// Endian is the byte order of stored multi-byte elements.
type Endian uint8

// Byte orders.
const (
	LittleEndian Endian = iota
	BigEndian
)

// String returns "little" or "big", as the bytes codec spells them.
func (e Endian) String() string {
	switch e {
	case LittleEndian:
		return "little"
	case BigEndian:
		return "big"
	}
	return "Endian(" + strconv.Itoa(int(e)) + ")"
}

// parseTypestr parses a zarr v2 (NumPy) dtype string such as "<u2",
// ">f4", "|u1" or "|b1".
func parseTypestr(s string) (DataType, Endian, error) {
	if len(s) < 3 {
		return 0, 0, malformed("dtype %q is not a NumPy typestr", s)
	}
	var t DataType
	switch s[1:] {
	case "b1":
		t = Bool
	case "i1":
		t = Int8
	case "i2":
		t = Int16
	case "i4":
		t = Int32
	case "i8":
		t = Int64
	case "u1":
		t = Uint8
	case "u2":
		t = Uint16
	case "u4":
		t = Uint32
	case "u8":
		t = Uint64
	case "f2":
		t = Float16
	case "f4":
		t = Float32
	case "f8":
		t = Float64
	default:
		return 0, 0, unsupported("dtype %q", s)
	}
	switch s[0] {
	case '<':
		return t, LittleEndian, nil
	case '>':
		return t, BigEndian, nil
	case '|':
		if t.Size() == 1 {
			return t, LittleEndian, nil
		}
	}
	return 0, 0, malformed("dtype %q has an invalid byte order", s)
}

// float16Bits rounds f to the nearest IEEE 754 binary16 value (ties to
// even) and returns its bits. NaN becomes a quiet NaN with the sign of f.
func float16Bits(f float64) uint16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	exp := int(b>>52) & 0x7ff
	mant := b & (1<<52 - 1)
	switch {
	case exp == 0x7ff && mant != 0:
		return sign | 0x7e00
	case exp == 0x7ff:
		return sign | 0x7c00
	}
	e := exp - 1023 // unbiased exponent of f
	if e > 15 {
		return sign | 0x7c00
	}
	if exp == 0 || e < -25 {
		// Zero, float64 subnormals and anything below half the smallest
		// float16 subnormal (2^-25) round to zero.
		return sign
	}
	// Significand with the implicit bit: 53 bits, value = m * 2^(e-52).
	m := mant | 1<<52
	// The float16 result is q * 2^-24 for subnormals (e < -14) or
	// q * 2^(e-10) for normals, q an 11-bit significand.
	shift := 42 // normal: keep 11 of 53 bits
	if e < -14 {
		shift = 42 + (-14 - e)
	}
	q := m >> uint(shift)
	rem := m & (1<<uint(shift) - 1)
	half := uint64(1) << uint(shift-1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	if e < -14 {
		// Subnormal: q counts units of 2^-24; a carry into 0x400 is the
		// smallest normal, which the same bit pattern encodes.
		return sign | uint16(q)
	}
	if q == 1<<11 { // rounding carried into the next binade
		q >>= 1
		e++
		if e > 15 {
			return sign | 0x7c00
		}
	}
	return sign | uint16(e+15)<<10 | uint16(q&0x3ff)
}

// float16Float64 converts binary16 bits to float64 exactly.
func float16Float64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(mant, -24)
	case 0x1f:
		if mant != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+mant, exp-25)
}
