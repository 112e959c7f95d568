package ptx

import (
	"fmt"
	"math"
	"math/bits"
)

// A Dtype is an element type as the kernels number it (kernels.h's
// DAMACY_* values). Bool through Float64 are source types. The output
// types are Float32 and BFloat16, and every integer type but Uint64 (for
// label sources, whose values pass through without float conversion).
type Dtype uint8

// Element types.
const (
	Bool     Dtype = 1
	Int8     Dtype = 2
	Int16    Dtype = 3
	Int32    Dtype = 4
	Int64    Dtype = 5
	Uint8    Dtype = 6
	Uint16   Dtype = 7
	Uint32   Dtype = 8
	Uint64   Dtype = 9
	Float16  Dtype = 10
	Float32  Dtype = 11
	Float64  Dtype = 12
	BFloat16 Dtype = 13
)

var dtypeNames = [...]string{
	Bool: "bool", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Uint8: "uint8", Uint16: "uint16", Uint32: "uint32", Uint64: "uint64",
	Float16: "float16", Float32: "float32", Float64: "float64", BFloat16: "bfloat16",
}

// String returns the zarr name of the type ("uint16", "bfloat16").
func (d Dtype) String() string {
	if int(d) < len(dtypeNames) && dtypeNames[d] != "" {
		return dtypeNames[d]
	}
	return fmt.Sprintf("Dtype(%d)", uint8(d))
}

// Size returns the size of one element in bytes, or 0 for an unknown type.
func (d Dtype) Size() int {
	switch d {
	case Bool, Int8, Uint8:
		return 1
	case Int16, Uint16, Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// IsSource reports whether d can be a source type of a copy op.
func (d Dtype) IsSource() bool { return d >= Bool && d <= Float64 }

// IsOutput reports whether d can be the type of the batch tensor: Float32,
// BFloat16, or an integer type other than Uint64.
func (d Dtype) IsOutput() bool {
	return d == Float32 || d == BFloat16 || d.IsInteger() && d != Uint64
}

// IsInteger reports whether d is one of the signed or unsigned integer
// types (Int8 through Uint64; not Bool).
func (d Dtype) IsInteger() bool { return d >= Int8 && d <= Uint64 }

// A Shuffle is the blosc shuffle filter a source chunk was written with.
type Shuffle uint8

// Shuffle modes (kernels.h's DAMACY_*SHUFFLE values).
const (
	NoShuffle   Shuffle = 0 // plain bytes
	ByteShuffle Shuffle = 1 // blosc byte shuffle
	BitShuffle  Shuffle = 2 // blosc bit shuffle
)

// String returns "none", "byte" or "bit".
func (s Shuffle) String() string {
	switch s {
	case NoShuffle:
		return "none"
	case ByteShuffle:
		return "byte"
	case BitShuffle:
		return "bit"
	}
	return fmt.Sprintf("Shuffle(%d)", uint8(s))
}

// Float32Bits converts an element of type d to float32 and returns the
// float32's bits. v holds the element's value bits: for a W-bit type its
// low W bits, in the host's integer sense (after any byte swap), e.g.
// math.Float64bits(x) for a float64 x or uint64(uint16(x)) for an int16 x.
// Bits above the type's width are ignored. It returns 0 for a type that is
// not a source type.
//
// The conversion is Go's float32(x): integers and float64 round to nearest
// even; float16 is exact; bool is 0 or 1 (any non-zero byte is true). A
// float64 or float16 NaN keeps its sign and the high bits of its payload
// and becomes quiet, as float32(x) does on amd64 and arm64; float32 passes
// through unchanged. The assemble kernel does exactly the same.
func Float32Bits(d Dtype, v uint64) uint32 {
	switch d {
	case Bool:
		if uint8(v) != 0 {
			return 0x3f800000
		}
		return 0
	case Int8:
		return math.Float32bits(float32(int8(v)))
	case Int16:
		return math.Float32bits(float32(int16(v)))
	case Int32:
		return math.Float32bits(float32(int32(v)))
	case Int64:
		return math.Float32bits(float32(int64(v)))
	case Uint8:
		return math.Float32bits(float32(uint8(v)))
	case Uint16:
		return math.Float32bits(float32(uint16(v)))
	case Uint32:
		return math.Float32bits(float32(uint32(v)))
	case Uint64:
		return math.Float32bits(float32(v))
	case Float16:
		return halfToFloatBits(uint16(v))
	case Float32:
		return uint32(v)
	case Float64:
		if v&(1<<63-1) > 0x7ff0000000000000 {
			return uint32(v>>32)&0x80000000 | 0x7fc00000 | uint32(v>>29)&0x003fffff
		}
		return math.Float32bits(float32(math.Float64frombits(v)))
	}
	return 0
}

// halfToFloatBits widens IEEE binary16 bits to binary32 bits exactly; a NaN
// keeps its sign and payload and becomes quiet.
func halfToFloatBits(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f && man == 0:
		return sign | 0x7f800000
	case exp == 0x1f:
		return sign | 0x7fc00000 | man<<13
	case exp == 0 && man == 0:
		return sign
	case exp == 0:
		s := uint32(bits.LeadingZeros32(man)) - 21 // shift the leading one to bit 10
		return sign | (113-s)<<23 | (man<<s&0x3ff)<<13
	}
	return sign | (exp+112)<<23 | man<<13
}

// BFloat16Bits converts float32 bits to bfloat16 bits, rounding to nearest
// with ties to even; overflow gives ±Inf. Every NaN becomes the canonical
// 0x7FFF, which is what the GPU's cvt.rn.bf16.f32 returns and what the
// assemble kernel writes, so host and device batches agree bit for bit.
func BFloat16Bits(f uint32) uint16 {
	if f&0x7fffffff > 0x7f800000 {
		return 0x7fff
	}
	return uint16((f + 0x7fff + (f>>16)&1) >> 16)
}
