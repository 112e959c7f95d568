//go:build !amd64 || purego

package cpu

// hasAVX2 is HasAVX2's answer: no AVX2 kernel is built here.
const hasAVX2 = false
