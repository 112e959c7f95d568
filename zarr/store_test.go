package zarr

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

var keyTests = []struct {
	key string
	ok  bool
}{
	{"zarr.json", true},
	{"a/b/c/0/1", true},
	{"a/.zarray", true},
	{"c/0.1.2", true},
	{"a..b/c", true},
	{"", false},
	{"/abs", false},
	{"/", false},
	{"a//b", false},
	{"a/", false},
	{"..", false},
	{"../x", false},
	{"a/../../x", false},
	{"a/..", false},
	{".", false},
	{"a/./b", false},
	{`a\b`, false},
	{`..\x`, false},
	{"a\x00b", false},
}

func TestValidateKey(t *testing.T) {
	for _, tt := range keyTests {
		err := ValidateKey(tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateKey(%q) = %v; want ok=%v", tt.key, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v; want an error wrapping ErrInvalidKey", tt.key, err)
		}
	}
}

// TestDirStore checks DirStore against files written here, including keys
// that must not escape the root.
func TestDirStore(t *testing.T) {
	root := t.TempDir()
	data := make([]byte, 1000)
	r := rand.New(rand.NewPCG(zarrtest.Seed(t), 0))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	os.MkdirAll(filepath.Join(root, "a", "c"), 0o755)
	os.WriteFile(filepath.Join(root, "a", "c", "0"), data, 0o644)
	outside := filepath.Join(filepath.Dir(root), "outside-"+filepath.Base(root))
	os.WriteFile(outside, []byte("secret"), 0o644)
	t.Cleanup(func() { os.Remove(outside) })

	s, err := NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, s, "a/c/0", data)
	if _, err := s.Size("a/c"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Size(directory) = %v; want an error that is not fs.ErrNotExist", err)
	}
	for _, tt := range keyTests {
		if tt.ok {
			continue
		}
		p := make([]byte, 4)
		if _, err := s.ReadAt(tt.key, p, 0); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ReadAt(%q) = %v; want ErrInvalidKey", tt.key, err)
		}
		if _, err := s.Size(tt.key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Size(%q) = %v; want ErrInvalidKey", tt.key, err)
		}
	}
	if _, err := s.Size("../" + filepath.Base(outside)); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Size of a file beside the root = %v; want ErrInvalidKey", err)
	}
	if _, err := NewDirStore(filepath.Join(root, "a", "c", "0")); err == nil {
		t.Error("NewDirStore(a file) succeeded")
	}
	if _, err := NewDirStore(filepath.Join(root, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("NewDirStore(missing) = %v; want fs.ErrNotExist", err)
	}
}

// noReaderAtFS hides ReadAt (and optionally Seek) of a MapFS's files, to
// exercise the fallbacks of NewFSStore.
type noReaderAtFS struct {
	fstest.MapFS
	seek bool
}

type seekFile struct{ f fs.File }

func (f seekFile) Stat() (fs.FileInfo, error) { return f.f.Stat() }
func (f seekFile) Read(p []byte) (int, error) { return f.f.Read(p) }
func (f seekFile) Close() error               { return f.f.Close() }
func (f seekFile) Seek(off int64, whence int) (int64, error) {
	return f.f.(io.Seeker).Seek(off, whence)
}

type plainFile struct{ f fs.File }

func (f plainFile) Stat() (fs.FileInfo, error) { return f.f.Stat() }
func (f plainFile) Read(p []byte) (int, error) { return f.f.Read(p) }
func (f plainFile) Close() error               { return f.f.Close() }

func (n noReaderAtFS) Open(name string) (fs.File, error) {
	f, err := n.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	if n.seek {
		return seekFile{f}, nil
	}
	return plainFile{f}, nil
}

func TestFSStore(t *testing.T) {
	data := make([]byte, 777)
	r := rand.New(rand.NewPCG(zarrtest.Seed(t), 0))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	m := fstest.MapFS{"x/c/1/2": &fstest.MapFile{Data: data, ModTime: time.Now()}}
	for _, tc := range []struct {
		name string
		fsys fs.FS
	}{
		{"MapFS", m},
		{"Seek", noReaderAtFS{m, true}},
		{"Read", noReaderAtFS{m, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testStore(t, NewFSStore(tc.fsys), "x/c/1/2", data)
		})
	}
}

// testStore checks the Store contract on an object key holding data.
func testStore(t *testing.T, s Store, key string, data []byte) {
	t.Helper()
	n, err := s.Size(key)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Size(%q) = %d, %v; want %d, nil", key, n, err, len(data))
	}
	for _, r := range []struct{ off, n int }{{0, 10}, {100, 500}, {len(data) - 1, 1}, {0, len(data)}} {
		p := make([]byte, r.n)
		got, err := s.ReadAt(key, p, int64(r.off))
		if got != r.n || err != nil && err != io.EOF || !bytes.Equal(p, data[r.off:r.off+r.n]) {
			t.Errorf("ReadAt(%q, %d bytes, %d) = %d, %v; want %d, nil and the data", key, r.n, r.off, got, err, r.n)
		}
	}
	p := make([]byte, 20)
	if got, err := s.ReadAt(key, p, int64(len(data)-5)); got != 5 || err != io.EOF || !bytes.Equal(p[:5], data[len(data)-5:]) {
		t.Errorf("ReadAt past the end = %d, %v; want 5, io.EOF", got, err)
	}
	if _, err := s.ReadAt(key, p, -1); err == nil {
		t.Error("ReadAt at a negative offset succeeded")
	}
	if _, err := s.ReadAt(key+"x", p, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAt(missing) = %v; want fs.ErrNotExist", err)
	}
	if _, err := s.Size(key + "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Size(missing) = %v; want fs.ErrNotExist", err)
	}
	b, err := ReadAll(s, key)
	if err != nil || !bytes.Equal(b, data) {
		t.Errorf("ReadAll(%q) = %d bytes, %v; want the data", key, len(b), err)
	}
	if _, err := ReadAll(s, key+"x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAll(missing) = %v; want fs.ErrNotExist", err)
	}
}

// shrinkingStore claims a larger size than it can read, as a file that
// was truncated between Size and ReadAt.
type shrinkingStore struct{ Store }

func (s shrinkingStore) Size(key string) (int64, error) {
	n, err := s.Store.Size(key)
	return n + 10, err
}

func TestReadAllShortRead(t *testing.T) {
	s := shrinkingStore{NewFSStore(fstest.MapFS{"k": &fstest.MapFile{Data: []byte("abc")}})}
	b, err := ReadAll(s, "k")
	if err == nil || b != nil {
		t.Fatalf("ReadAll of a shrinking object = %q, %v; want nil and an error", b, err)
	}
}
