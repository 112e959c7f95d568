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
			if streams(b, o) {
				mode = 3
			}
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

// streamBytes is the least output of a block that streams (see streams).
const streamBytes = 256 << 10

// streams reports whether block b, written forward (b.ds is the output
// size o), goes past the caches, with non-temporal stores, which save
// reading each line before it is written: where the block is large
// (streamBytes or more: larger than a core's L2, so that it would leave
// the caches before anything reads it), its rows a whole number of
// 8-element steps and every step aligned to the stores' width (8*o); or
// where the output it is part of is (b.big) and its rows are whole cache
// lines, so that no line is written in part past the caches.
func streams(b rowBlock, o int) bool {
	w := 8 * o
	if b.n%8 != 0 || uintptr(b.d)%uintptr(w) != 0 || b.dr%w != 0 {
		return false
	}
	return b.n*b.rows*o >= streamBytes || b.big && uintptr(b.d)%64 == 0 && b.n*o%64 == 0 && b.dr%64 == 0
}

// convertAVX2 converts the block b of row kind k, whose rows have at
// least 8 elements, read contiguously (b.ss is the source size), through
// the intensity map m unless nil (mode 0: b.ds is the output size; 1:
// minus the output size; 2: any; 3: as 0, with non-temporal stores,
// where streams(b, output size)).
//
//go:noescape
func convertAVX2(k rowKind, mode int, m *[4]float32, b *rowBlock)
