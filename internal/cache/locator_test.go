package cache

import (
	"io/fs"
	"testing"
)

// countingStore is a zarr.Store of object sizes that counts Size calls.
type countingStore struct {
	sizes map[string]int64
	calls int
}

func (s *countingStore) ReadAt(key string, p []byte, off int64) (int, error) {
	return 0, fs.ErrNotExist
}

func (s *countingStore) Size(key string) (int64, error) {
	s.calls++
	n, ok := s.sizes[key]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return n, nil
}

// TestLocatorChecked: a cached size is used while its object's version
// stays the same, and read again once it changes.
func TestLocatorChecked(t *testing.T) {
	st := &countingStore{sizes: map[string]int64{"c/0": 10}}
	l := &Locator{Store: st, ID: "a", Sizes: NewLRU[string, int64](4, nil), Versions: NewLRU[string, Version](8, nil)}
	v := Version{Size: 10, ModTime: 1}
	loc := l.Checked(func(string) Version { return v })
	for range 3 {
		if n, err := loc.Size("c/0"); n != 10 || err != nil {
			t.Fatalf("Size = %d, %v", n, err)
		}
	}
	if st.calls != 1 {
		t.Fatalf("%d store reads for one version; want 1", st.calls)
	}
	st.sizes["c/0"] = 12
	v = Version{Size: 12, ModTime: 2}
	if n, err := loc.Size("c/0"); n != 12 || err != nil {
		t.Fatalf("Size after the object changed = %d, %v; want 12", n, err)
	}
	if st.calls != 2 {
		t.Fatalf("%d store reads; want 2", st.calls)
	}
	// A version dropped from its LRU counts as unknown: read again.
	l.Versions.Remove(l.sizeKey("c/0"))
	if n, _ := loc.Size("c/0"); n != 12 || st.calls != 3 {
		t.Fatalf("Size = %d after %d reads; want 12 after 3", n, st.calls)
	}
}
