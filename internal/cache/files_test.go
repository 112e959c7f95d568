package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// TestFDCache checks the open-file cache: at most capacity files stay
// open, a file evicted while a read uses it stays open until the read
// ends, a failed open is not cached, and closeAll closes what is left.
func TestFDCache(t *testing.T) {
	dir := t.TempDir()
	paths := make([]string, 5)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(paths[i], []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := NewFiles(3)
	readable := func(o *openFile) bool {
		var b [1]byte
		_, err := o.f.ReadAt(b[:], 0)
		return err == nil
	}
	held, err := c.acquire(paths[0]) // pinned while the others push it out
	if err != nil {
		t.Fatal(err)
	}
	var opened []*openFile
	for _, p := range paths[1:] {
		o, err := c.acquire(p)
		if err != nil {
			t.Fatal(err)
		}
		o.release()
		opened = append(opened, o)
	}
	if !readable(held) {
		t.Fatal("a file evicted while pinned was closed under its read")
	}
	if readable(opened[0]) {
		t.Error("an evicted, unpinned file is still open")
	}
	for _, o := range opened[1:] {
		if !readable(o) {
			t.Error("a cached file was closed")
		}
	}
	held.release()
	if readable(held) {
		t.Error("an evicted file is still open after its last read")
	}
	again, err := c.acquire(paths[0])
	if err != nil || again == held || !readable(again) {
		t.Fatalf("acquire after eviction: %v (same entry %v)", err, again == held)
	}
	again.release()

	missing := filepath.Join(dir, "missing")
	if _, err := c.acquire(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("acquire of a missing file: %v", err)
	}
	if err := os.WriteFile(missing, []byte{9}, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := c.acquire(missing)
	if err != nil {
		t.Fatalf("a failed open was cached: %v", err)
	}
	o.release()

	c.Close()
	if readable(o) || readable(again) {
		t.Error("closeAll left files open")
	}
}

// TestFDCacheConcurrent acquires a few files from many goroutines through
// a cache smaller than the set (run it under -race): every read finds its
// file open and reads that file.
func TestFDCacheConcurrent(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := range 6 {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(p, []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	c := NewFiles(2)
	var bad atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 200 {
				i := (g + k) % len(paths)
				o, err := c.acquire(paths[i])
				if err != nil {
					bad.Add(1)
					return
				}
				var b [1]byte
				if _, err := o.f.ReadAt(b[:], 0); err != nil || b[0] != byte(i) {
					bad.Add(1)
				}
				o.release()
			}
		})
	}
	wg.Wait()
	c.Close()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d reads failed", n)
	}
}

// TestFilesRefresh: a file renamed over a cached one is read once Refresh
// is told of it; the same file is kept open.
func TestFilesRefresh(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shard")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewFiles(4)
	defer c.Close()
	read := func() string {
		b := make([]byte, 3)
		if _, err := c.ReadAt(path, b, 0); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(); got != "old" {
		t.Fatalf("read %q", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	c.Refresh(path, fi)
	o, _ := c.files.Peek(path)
	tmp := filepath.Join(dir, "shard.tmp")
	if err := os.WriteFile(tmp, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "old" {
		t.Fatalf("before Refresh, read %q from the cached file; want old", got)
	}
	if o2, _ := c.files.Peek(path); o2 != o {
		t.Fatal("Refresh with the same file dropped it")
	}
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	c.Refresh(path, fi)
	if got := read(); got != "new" {
		t.Fatalf("after Refresh, read %q; want new", got)
	}
}
