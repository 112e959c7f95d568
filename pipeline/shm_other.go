//go:build !linux || !(amd64 || arm64)

package pipeline

// sharedMem returns ordinary Go memory: batch slots are shared with other
// processes only on Linux (amd64 and arm64), through memfds.
func sharedMem(_ string, size int64) (mem []byte, fd int, err error) {
	return make([]byte, size), -1, nil
}

// freeSharedMem leaves Go memory to the garbage collector.
func freeSharedMem([]byte, int) {}

// hostRegion returns Go memory here.
func hostRegion(size int64) ([]byte, error) { return make([]byte, size), nil }

// freeHostRegion leaves Go memory to the garbage collector.
func freeHostRegion([]byte) {}
