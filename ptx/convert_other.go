//go:build !amd64 || purego

package ptx

// vectorRow returns twin: there is no vector row loop.
func vectorRow(src, out Dtype, twin rowFunc) rowFunc { return twin }
