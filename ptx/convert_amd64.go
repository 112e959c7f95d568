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

// convertRows converts rows rows of n elements each, the rows dstStride
// and srcStride bytes apart: eight elements at a time with AVX2 where the
// CPU has it, else in Go. A row of at least 8 that is not a multiple of 8
// ends with a step over its last 8 elements, which writes some of them a
// second time, with the same values.
func convertRows(k rowKind, dst, src unsafe.Pointer, n, rows, dstStride, srcStride int) {
	if !hasAVX2 || n < 8 {
		convertRowsGo(k, dst, src, n, rows, dstStride, srcStride)
		return
	}
	m := n &^ 7
	in, out := k.sizes()
	tailDst, tailSrc := (n-8)*out, (n-8)*in
	for r := range rows {
		if r > 0 { // one row past the last may lie outside the allocation
			dst, src = unsafe.Add(dst, dstStride), unsafe.Add(src, srcStride)
		}
		convertAVX2(k, dst, src, m)
		if m < n {
			convertAVX2(k, unsafe.Add(dst, tailDst), unsafe.Add(src, tailSrc), 8)
		}
	}
}

// convertAVX2 converts n elements, a positive multiple of 8.
//
//go:noescape
func convertAVX2(k rowKind, dst, src unsafe.Pointer, n int)

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax, edx uint32)
