package pipeline

import "unsafe"

// sliceAddr is the address of b's first byte (0 for an empty slice).
func sliceAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
