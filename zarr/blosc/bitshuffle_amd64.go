//go:build !purego

package blosc

import (
	"unsafe"

	"github.com/damacy-go/damacy/internal/cpu"
)

// bitToBytePlanesSIMD transposes the first rl&^31 row bytes of each of the
// ts planes of src into dst, as bitToBytePlanes does, with AVX2 where the
// CPU has it (32 row bytes, 256 elements, at a time), and returns how many
// row bytes of each plane it did: rl&^31, or 0.
func bitToBytePlanesSIMD(dst, src []byte, ts, rl int) int {
	if !cpu.HasAVX2() || rl < 32 {
		return 0
	}
	_ = dst[8*rl*ts-1] // every plane's bytes lie in dst and src
	_ = src[8*rl*ts-1]
	bitPlanesAVX2(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), rl, ts)
	return rl &^ 31
}

// bitPlanesAVX2 transposes rl&^31 row bytes of each of planes planes of
// 8 bit-rows of rl bytes at src into byte planes of 8*rl bytes at dst; rl
// is at least 32.
//
//go:noescape
func bitPlanesAVX2(dst, src unsafe.Pointer, rl, planes int)

// unshuffleSIMD byte-unshuffles the first n&^31 of the n elements of
// typesize ts of a block, as unshuffleBlock does, with AVX2 where the CPU
// has it and ts is 2 or 4 (32 elements at a time), and returns how many
// elements it did: n&^31, or 0.
func unshuffleSIMD(dst, src []byte, n, ts int) int {
	if !cpu.HasAVX2() || n < 32 || (ts != 2 && ts != 4) {
		return 0
	}
	_ = dst[n*ts-1] // every element lies in dst and src
	_ = src[n*ts-1]
	unshuffleAVX2(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), n, ts)
	return n &^ 31
}

// unshuffleAVX2 byte-unshuffles the first n&^31 elements (n >= 32) of a
// block of n elements of ts bytes, ts 2 or 4, from src into dst.
//
//go:noescape
func unshuffleAVX2(dst, src unsafe.Pointer, n, ts int)
