//go:build !amd64 || purego

package cpu

import "testing"

// Without an AVX2 kernel built, HasAVX2 reports none.
func TestHasAVX2(t *testing.T) {
	if HasAVX2() {
		t.Error("HasAVX2() = true; want false: no assembly is built here")
	}
}
