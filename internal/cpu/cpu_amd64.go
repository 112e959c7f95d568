//go:build !purego

package cpu

// hasAVX2 is HasAVX2's answer; set once at start-up, read-only after.
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

// cpuid runs CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv reads the extended control register XCR0 (EAX its low half, EDX
// its high half).
func xgetbv() (eax, edx uint32)
