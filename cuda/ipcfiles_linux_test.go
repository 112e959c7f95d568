package cuda

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestIPCFilePrefix(t *testing.T) {
	for _, tt := range []struct {
		uid, pid int
		want     string
	}{
		{1000, 0x1a2b, "cuda.shm.1000.1a2b."},
		{0, 1, "cuda.shm.0.1."},
		{4242, 4194304, "cuda.shm.4242.400000."},
	} {
		if got := ipcFilePrefix(tt.uid, tt.pid); got != tt.want {
			t.Errorf("ipcFilePrefix(%d, %d) = %q, want %q", tt.uid, tt.pid, got, tt.want)
		}
	}
}

// TestRemoveIPCFiles removes the files of one pid and user, and no other:
// not those of a pid whose hex starts the same, nor another user's.
func TestRemoveIPCFiles(t *testing.T) {
	dir := t.TempDir()
	names := []string{
		"cuda.shm.1000.1a.0", "cuda.shm.1000.1a.1", // pid 0x1a, user 1000: removed
		"cuda.shm.1000.1ab.0", "cuda.shm.1000.a.0", // other pids
		"cuda.shm.1001.1a.0", "cuda.shm.10000.1a.0", // other users
		"cuda.shm.1000.1A.0", "nccl-1a", // not the driver's form
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeIPCFiles(dir, 1000, 0x1a); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := slices.Sorted(slices.Values(names[2:])); !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if err := removeIPCFiles(filepath.Join(dir, "missing"), 1000, 0x1a); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
	if err := RemoveIPCFiles(0x7fffffff); err != nil {
		t.Errorf("RemoveIPCFiles of a pid that has no files: %v", err)
	}
}
