package ptx

import (
	"math"
	"unsafe"
)

// rowKind is one of the conversions of a row of unshuffled little-endian
// integers into the batch that convertRows does in one pass: the source
// type and the output type.
type rowKind uint8

// The row kinds; the assembly (convert_amd64.s) uses the same numbers.
const (
	u8F32 rowKind = iota
	u16F32
	i16F32
	u8BF16
	u16BF16
	i16BF16
)

// rowKindOf returns the row kind of source type src into output type out,
// and false where convertRows has none (only 8- and 16-bit integers into
// float32 or bfloat16 have).
func rowKindOf(src, out Dtype) (rowKind, bool) {
	if out != Float32 && out != BFloat16 {
		return 0, false
	}
	var k rowKind
	switch src {
	case Uint8:
		k = u8F32
	case Uint16:
		k = u16F32
	case Int16:
		k = i16F32
	default:
		return 0, false
	}
	if out == BFloat16 {
		k += u8BF16
	}
	return k, true
}

// convertRowGo converts n elements at src into n elements at dst, as
// castRow and writeRow do for the row kind: the portable loop.
func convertRowGo(k rowKind, dst, src unsafe.Pointer, n int) {
	if n == 0 {
		return
	}
	switch k {
	case u8F32:
		toFloat32(dst, (*uint8)(src), n)
	case u16F32:
		toFloat32(dst, (*uint16)(src), n)
	case i16F32:
		toFloat32(dst, (*int16)(src), n)
	case u8BF16:
		toBFloat16(dst, (*uint8)(src), n)
	case u16BF16:
		toBFloat16(dst, (*uint16)(src), n)
	case i16BF16:
		toBFloat16(dst, (*int16)(src), n)
	}
}

// convertRowsGo converts rows rows of n elements each, the rows dstStride
// and srcStride bytes apart, with convertRowGo.
func convertRowsGo(k rowKind, dst, src unsafe.Pointer, n, rows, dstStride, srcStride int) {
	for r := range rows {
		if r > 0 { // one row past the last may lie outside the allocation
			dst, src = unsafe.Add(dst, dstStride), unsafe.Add(src, srcStride)
		}
		convertRowGo(k, dst, src, n)
	}
}

// rowInt is a source type of a row kind.
type rowInt interface{ uint8 | uint16 | int16 }

// toFloat32 writes float32(src[i]) at dst, for n elements.
func toFloat32[S rowInt](dst unsafe.Pointer, src *S, n int) {
	o, in := unsafe.Slice((*float32)(dst), n), unsafe.Slice(src, n)
	for i, x := range in {
		o[i] = float32(x)
	}
}

// toBFloat16 writes the bfloat16 bits of src[i] at dst, for n elements.
func toBFloat16[S rowInt](dst unsafe.Pointer, src *S, n int) {
	o, in := unsafe.Slice((*uint16)(dst), n), unsafe.Slice(src, n)
	for i, x := range in {
		o[i] = BFloat16Bits(math.Float32bits(float32(x)))
	}
}

// sizes returns the source and output element sizes of k.
func (k rowKind) sizes() (in, out int) {
	in, out = 2, 4
	if k == u8F32 || k == u8BF16 {
		in = 1
	}
	if k >= u8BF16 {
		out = 2
	}
	return in, out
}
