//go:build !purego

package ptx

import "unsafe"

// hasAVX2 reports whether the CPU and the OS support AVX2; set once at
// start-up, read-only after.
var hasAVX2 = detectAVX2()

// detectAVX2 asks CPUID for AVX and AVX2 and XGETBV whether the OS saves
// the YMM registers.
func detectAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}

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
	if !hasAVX2 || !ok {
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

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax, edx uint32)
