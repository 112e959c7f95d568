package ptx

// rowKind is one of the conversions of the vector row loop (see
// vectorRow): unshuffled 8- and 16-bit integers in host byte order into a
// float output.
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
// and false where there is none (only 8- and 16-bit integers into float32
// or bfloat16 have one).
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
