//go:build !amd64 || purego

package blosc

// bitToBytePlanesSIMD transposes nothing where there is no vector kernel:
// bitToBytePlanes does every row byte.
func bitToBytePlanesSIMD(dst, src []byte, ts, rl int) int { return 0 }

// unshuffleSIMD unshuffles nothing where there is no vector kernel:
// unshuffleBlock does every element.
func unshuffleSIMD(dst, src []byte, n, ts int) int { return 0 }
