//go:build !amd64 || purego

package ptx

import "unsafe"

// convertRow converts n elements at src into n elements at dst as row
// kind k.
func convertRow(k rowKind, dst, src unsafe.Pointer, n int) {
	convertRowGo(k, dst, src, n)
}
