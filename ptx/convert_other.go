//go:build !amd64 || purego

package ptx

import "unsafe"

// convertRows converts rows rows of n elements each, the rows dstStride
// and srcStride bytes apart.
func convertRows(k rowKind, dst, src unsafe.Pointer, n, rows, dstStride, srcStride int) {
	convertRowsGo(k, dst, src, n, rows, dstStride, srcStride)
}
