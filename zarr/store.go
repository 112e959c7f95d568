package zarr

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Store is where a hierarchy's objects live: metadata documents, chunks and
// shards, each named by a key such as "image/0/zarr.json" or "image/0/c/1/2".
// Keys are slash-separated relative paths (see ValidateKey).
//
// Implementations must be safe for concurrent use.
type Store interface {
	// ReadAt reads len(p) bytes of the object key starting at byte off,
	// with io.ReaderAt semantics: when it returns n < len(p) the error says
	// why, io.EOF at the end of the object. It returns an error wrapping
	// fs.ErrNotExist when the object is absent.
	ReadAt(key string, p []byte, off int64) (int, error)

	// Size returns the size of the object key in bytes, or an error
	// wrapping fs.ErrNotExist when the object is absent.
	Size(key string) (int64, error)
}

// TailReader is an optional capability of a Store: reading the end of an
// object and learning its size in one request, as object stores can with
// a suffix range. ReadShardIndex uses it for shards whose index is at the
// end.
type TailReader interface {
	// ReadTail fills p with the last len(p) bytes of the object key and
	// returns the object's size. When the object is shorter than p, it
	// returns the size and leaves p's content unspecified. An absent
	// object is an error wrapping fs.ErrNotExist.
	ReadTail(key string, p []byte) (size int64, err error)
}

// ObjectReader is an optional capability of a Store: reading a whole
// object in one request, as object stores can with a plain GET. ReadAll
// uses it for metadata documents.
type ObjectReader interface {
	// ReadObject returns the whole object key. An object larger than
	// limit bytes is an error wrapping ErrTooLarge; an absent one an
	// error wrapping fs.ErrNotExist.
	ReadObject(key string, limit int64) ([]byte, error)
}

// ValidateKey reports whether key is a clean store key: a non-empty,
// slash-separated relative path without empty, "." or ".." segments,
// without a leading or trailing slash, and without backslashes or NUL
// bytes. Errors wrap ErrInvalidKey.
func ValidateKey(key string) error {
	bad := ""
	switch {
	case key == "":
		bad = "empty key"
	case strings.HasPrefix(key, "/"):
		bad = "absolute key"
	case strings.ContainsRune(key, '\\'):
		bad = "backslash in key"
	case strings.ContainsRune(key, 0):
		bad = "NUL byte in key"
	default:
		for seg := range strings.SplitSeq(key, "/") {
			switch seg {
			case "":
				bad = "empty segment"
			case ".", "..":
				bad = fmt.Sprintf("%q segment", seg)
			}
			if bad != "" {
				break
			}
		}
	}
	if bad != "" {
		return fmt.Errorf("zarr: key %q: %w: %s", key, ErrInvalidKey, bad)
	}
	return nil
}

// joinKey joins a node path (possibly empty, meaning the root) and a
// relative key.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "/" + key
}

// cleanPath validates a node path given to an Open function: "" or "."
// mean the root; other paths must be valid keys once surrounding slashes
// are trimmed.
func cleanPath(path string) (string, error) {
	p := strings.Trim(path, "/")
	if p == "" || p == "." {
		return "", nil
	}
	if err := ValidateKey(p); err != nil {
		return "", err
	}
	return p, nil
}

// DirStore is a Store over a directory of the local filesystem. Keys map to
// files below the root; a key that is not valid, or that would resolve
// outside the root, is refused with an error wrapping ErrInvalidKey. The
// check is lexical: symbolic links inside the root are followed.
//
// Each ReadAt opens, reads and closes the file; callers that read one file
// many times can open it themselves through Path.
type DirStore struct {
	root string // absolute and clean
}

// NewDirStore returns a store rooted at the directory root, which must
// exist: a missing root is ErrNotFound (and fs.ErrNotExist).
func NewDirStore(root string) (*DirStore, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("zarr: %s: %w", root, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("zarr: %s: %w: %w", root, ErrNotFound, bare(err))
	case err != nil:
		return nil, fmt.Errorf("zarr: %s: %w", root, bare(err))
	case !fi.IsDir():
		return nil, fmt.Errorf("zarr: %s: not a directory", root)
	}
	return &DirStore{root: abs}, nil
}

// bare returns err, an *fs.PathError, as an error whose message leaves out
// the operation and path (for a message that names the path or the key
// already) and which unwraps to err; other errors come back unchanged.
func bare(err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	return &pathCause{pe}
}

// pathCause is an *fs.PathError that reads as its cause alone.
type pathCause struct{ pe *fs.PathError }

func (c *pathCause) Error() string { return c.pe.Err.Error() }

func (c *pathCause) Unwrap() error { return c.pe }

// Root returns the store's root directory, absolute and cleaned.
func (d *DirStore) Root() string { return d.root }

// Path returns the file that holds the object key.
func (d *DirStore) Path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	p := filepath.Join(d.root, filepath.FromSlash(key))
	if !strings.HasPrefix(p, d.root+string(filepath.Separator)) {
		return "", fmt.Errorf("zarr: key %q: %w: resolves outside the store root", key, ErrInvalidKey)
	}
	return p, nil
}

// ReadAt implements Store.
func (d *DirStore) ReadAt(key string, p []byte, off int64) (int, error) {
	name, err := d.Path(key)
	if err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("zarr: read %s: negative offset %d", key, off)
	}
	f, err := os.Open(name)
	if err != nil {
		return 0, fmt.Errorf("zarr: %s: %w", key, bare(err))
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("zarr: read %s: %w", key, bare(err))
	}
	return n, err
}

// Size implements Store. A key that names a directory is an error, not an
// absent object.
func (d *DirStore) Size(key string) (int64, error) {
	name, err := d.Path(key)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(name)
	if err != nil {
		return 0, fmt.Errorf("zarr: %s: %w", key, bare(err))
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("zarr: %s: not a regular file", key)
	}
	return fi.Size(), nil
}

// NewFSStore returns a Store that reads from fsys, for example a
// testing/fstest.MapFS or an os.DirFS. Files that implement io.ReaderAt
// are read in place; others are read through Seek, or by skipping bytes.
func NewFSStore(fsys fs.FS) Store { return fsStore{fsys} }

type fsStore struct{ fsys fs.FS }

func (s fsStore) ReadAt(key string, p []byte, off int64) (int, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("zarr: read %s: negative offset %d", key, off)
	}
	f, err := s.fsys.Open(key)
	if err != nil {
		return 0, fmt.Errorf("zarr: %s: %w", key, bare(err))
	}
	defer f.Close()
	var n int
	switch r := f.(type) {
	case io.ReaderAt:
		n, err = r.ReadAt(p, off)
	case io.Seeker:
		if _, err = r.Seek(off, io.SeekStart); err == nil {
			n, err = io.ReadFull(f, p)
		}
	default:
		if _, err = io.CopyN(io.Discard, f, off); err == nil {
			n, err = io.ReadFull(f, p)
		}
	}
	switch {
	case err == io.ErrUnexpectedEOF || (err == io.EOF && n < len(p)):
		err = io.EOF
	case err == io.EOF:
		err = nil
	case err != nil:
		err = fmt.Errorf("zarr: read %s: %w", key, bare(err))
	}
	return n, err
}

func (s fsStore) Size(key string) (int64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	fi, err := fs.Stat(s.fsys, key)
	if err != nil {
		return 0, fmt.Errorf("zarr: %s: %w", key, bare(err))
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("zarr: %s: not a regular file", key)
	}
	return fi.Size(), nil
}

// ReadAll returns the whole object key. It fails if the object is absent
// (the error wraps fs.ErrNotExist) or if fewer bytes than its size could be
// read.
func ReadAll(s Store, key string) ([]byte, error) {
	return readAllMax(s, key, math.MaxInt)
}

// maxMetadataBytes bounds the metadata documents this package reads; real
// ones are kilobytes.
const maxMetadataBytes = 64 << 20

// readAllMax is ReadAll with a size limit.
func readAllMax(s Store, key string, limit int64) ([]byte, error) {
	if r, ok := s.(ObjectReader); ok {
		return r.ReadObject(key, limit)
	}
	n, err := s.Size(key)
	if err != nil {
		return nil, err
	}
	if n < 0 || n > limit {
		return nil, &FormatError{Key: key, Offset: -1, Err: &reason{kind: ErrTooLarge, msg: fmt.Sprintf("object of %d bytes exceeds the limit of %d", n, limit)}}
	}
	b := make([]byte, n)
	got, err := s.ReadAt(key, b, 0)
	if got == len(b) {
		return b, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("zarr: read %s: got %d of %d bytes", key, got, n)
	}
	return nil, err
}
