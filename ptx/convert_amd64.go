//go:build !purego

package ptx

import (
	"unsafe"

	"github.com/damacy-go/damacy/internal/cpu"
)

// vectorRow returns the row loop (see rowFunc) of source type src into
// output type out that runs convertAVX2 where it can: with AVX2, for a row
// kind (8- and 16-bit integers into float32 or bfloat16), on rows of at
// least 8 contiguous source elements, any output strides. twin, the
// portable loop, does the other blocks, and is returned as it is where
// there is no vector loop. A row that is not a multiple of 8 ends with a
// step over its last 8 elements, which writes some of them a second time,
// with the same values.
func vectorRow(src, out Dtype, twin rowFunc) rowFunc {
	k, ok := rowKindOf(src, out)
	if !cpu.HasAVX2() || !ok {
		return twin
	}
	in, o := k.sizes()
	return func(h *hostOp, b rowBlock) bool {
		if b.ss != in || b.n < 8 {
			return twin(h, b)
		}
		mode := 2
		switch b.ds {
		case o:
			mode = 0
		case -o:
			mode = 1
		}
		var m *[4]float32 // Scale, Offset, Lo, Hi
		if h.intensity != nil {
			m = (*[4]float32)(unsafe.Pointer(&h.intensity.Scale))
		}
		convertAVX2(k, mode, m, &b)
		return true
	}
}

// convertAVX2 converts the block b of row kind k, whose rows have at
// least 8 elements, read contiguously (b.ss is the source size), through
// the intensity map m unless nil (mode 0: b.ds is the output size; 1:
// minus the output size; 2: any).
//
//go:noescape
func convertAVX2(k rowKind, mode int, m *[4]float32, b *rowBlock)
