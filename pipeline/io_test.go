package pipeline

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/damacy-go/damacy/zarr"
)

// TestReadPieces: preads cuts a read op into IO tasks of at most
// readPieceBytes that cover it exactly, in order; an empty read is one
// empty task.
func TestReadPieces(t *testing.T) {
	lengths := []int64{0, 1, readPieceBytes - 1, readPieceBytes, readPieceBytes + 1, 2*readPieceBytes + 12345}
	reads := make([]readOp, len(lengths))
	for i, n := range lengths {
		reads[i] = readOp{key: "k", length: n}
	}
	pieces := readPieces(reads)
	k := 0
	for i := range reads {
		var at int64
		for k < len(pieces) && pieces[k].r == &reads[i] {
			p := pieces[k]
			if p.at != at || p.n > readPieceBytes || (p.n == 0) != (reads[i].length == 0) {
				t.Errorf("read %d (%d bytes): piece [%d, +%d) after %d bytes", i, reads[i].length, p.at, p.n, at)
			}
			at += p.n
			k++
		}
		if at != reads[i].length {
			t.Errorf("read %d (%d bytes): pieces cover %d", i, reads[i].length, at)
		}
	}
	if k != len(pieces) || len(pieces) != 1+1+1+1+2+3 {
		t.Errorf("%d pieces, %d matched", len(pieces), k)
	}
}

// TestReadAtPieces: a large read op read piece by piece gives the file's
// bytes, and a file shorter than the op fails in the piece that comes
// short with the error the whole read gives (naming the op's length,
// offset and the bytes there).
func TestReadAtPieces(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 2*readPieceBytes+777)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(dir, "c"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := zarr.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	src := &source{uri: dir, dir: ds}
	fds := newFDCache()
	defer fds.closeAll()
	read := func(r readOp) ([]byte, error) {
		dst := make([]byte, r.length)
		rs := []readOp{r}
		for _, p := range readPieces(rs) {
			if err := fds.readAt(p.r, dst[p.at:p.at+p.n], p.at); err != nil {
				return nil, err
			}
		}
		return dst, nil
	}
	r := readOp{src: src, key: "c", offset: 100, length: int64(len(data)) - 100}
	got, err := read(r)
	if err != nil || !bytes.Equal(got, data[100:]) {
		t.Fatalf("pieces read %d bytes (%v); want the file's", len(got), err)
	}
	r.length += readPieceBytes // past the end: the third piece comes short, the fourth finds nothing
	_, err = read(r)
	whole := fds.read(&r, make([]byte, r.length))
	if err == nil || whole == nil || err.Error() != whole.Error() {
		t.Errorf("short file: pieces say %v; the whole read says %v", err, whole)
	}
}
