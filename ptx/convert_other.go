//go:build !amd64 || purego

package ptx

import "unsafe"

// convertRow converts n elements at src into n elements at dst as row
// kind k.
func convertRow(k rowKind, dst, src unsafe.Pointer, n int) {
	convertRowGo(k, dst, src, n)
}

// convertRows converts rows rows of n elements each, the rows dstStride
// and srcStride bytes apart.
func convertRows(k rowKind, dst, src unsafe.Pointer, n, rows, dstStride, srcStride int) {
	for r := range rows {
		if r > 0 { // one row past the last may lie outside the allocation
			dst, src = unsafe.Add(dst, dstStride), unsafe.Add(src, srcStride)
		}
		convertRowGo(k, dst, src, n)
	}
}
