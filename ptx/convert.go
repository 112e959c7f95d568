package ptx

import (
	"math"
	"unsafe"
)

// rowKind is one of the conversions of a row of unshuffled little-endian
// integers into the batch that convertRow does in one pass: the source
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
// and false where convertRow has none (only 8- and 16-bit integers have).
func rowKindOf(src, out Dtype) (rowKind, bool) {
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
// castRow and writeRow do for the row kind: the portable loop, and the
// tail of convertRow's vector loop.
func convertRowGo(k rowKind, dst, src unsafe.Pointer, n int) {
	if n == 0 {
		return
	}
	switch k {
	case u8F32:
		o, in := unsafe.Slice((*float32)(dst), n), unsafe.Slice((*uint8)(src), n)
		for i, x := range in {
			o[i] = float32(x)
		}
	case u16F32:
		o, in := unsafe.Slice((*float32)(dst), n), unsafe.Slice((*uint16)(src), n)
		for i, x := range in {
			o[i] = float32(x)
		}
	case i16F32:
		o, in := unsafe.Slice((*float32)(dst), n), unsafe.Slice((*int16)(src), n)
		for i, x := range in {
			o[i] = float32(x)
		}
	case u8BF16:
		o, in := unsafe.Slice((*uint16)(dst), n), unsafe.Slice((*uint8)(src), n)
		for i, x := range in {
			o[i] = BFloat16Bits(math.Float32bits(float32(x)))
		}
	case u16BF16:
		o, in := unsafe.Slice((*uint16)(dst), n), unsafe.Slice((*uint16)(src), n)
		for i, x := range in {
			o[i] = BFloat16Bits(math.Float32bits(float32(x)))
		}
	case i16BF16:
		o, in := unsafe.Slice((*uint16)(dst), n), unsafe.Slice((*int16)(src), n)
		for i, x := range in {
			o[i] = BFloat16Bits(math.Float32bits(float32(x)))
		}
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
