package blosc

// bitToBytePlanesSIMD transposes nothing where there is no vector kernel:
// bitToBytePlanes does every row byte.
func bitToBytePlanesSIMD(dst, src []byte, ts, rl int) int { return 0 }
