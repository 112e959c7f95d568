package cpu

// HasAVX2 reports whether the CPU has AVX and AVX2 and the OS saves the
// YMM registers; false with the purego tag and off amd64.
func HasAVX2() bool { return hasAVX2 }
