package bench

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// processRSS tells the process's own memory from its pages of mapped
// files: touching a mapped file grows the second, not the first.
func TestProcessRSS(t *testing.T) {
	const n = 32 << 20
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	own0, files0, err := processRSS()
	if err != nil || own0 <= 0 {
		t.Fatalf("processRSS: %d, %d, %v", own0, files0, err)
	}
	var sum byte
	for i := 0; i < n; i += os.Getpagesize() {
		sum += m[i]
	}
	own1, files1, err := processRSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("own %d -> %d, files %d -> %d (sum %d)", own0, own1, files0, files1, sum)
	if files1-files0 < n*3/4 {
		t.Errorf("touching a %d-byte mapped file grew the file pages by %d", n, files1-files0)
	}
	if own1-own0 > n/4 {
		t.Errorf("touching a %d-byte mapped file grew the own pages by %d", n, own1-own0)
	}
}
