package blosc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fixture is a chunk written by numcodecs or tensorstore and committed
// under testdata/fixtures (see testdata/README.md).
type fixture struct {
	Name   string `json:"name"`
	Writer string `json:"writer"`
	Note   string `json:"note"`
	Nbytes int    `json:"nbytes"`
	SHA256 string `json:"sha256"`
}

func readFixtures(t testing.TB) ([]fixture, map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fixtures")
	b, err := os.ReadFile(filepath.Join(dir, "fixtures.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	if err := json.Unmarshal(b, &fs); err != nil {
		t.Fatal(err)
	}
	chunks := map[string][]byte{}
	for _, f := range fs {
		if chunks[f.Name], err = os.ReadFile(filepath.Join(dir, f.Name+".blosc")); err != nil {
			t.Fatal(err)
		}
	}
	return fs, chunks
}

// TestFixtures decodes the committed chunks of other implementations, with
// no Python needed.
func TestFixtures(t *testing.T) {
	fs, chunks := readFixtures(t)
	seen := map[Compressor]bool{}
	for _, f := range fs {
		chunk := chunks[f.Name]
		dst := make([]byte, f.Nbytes)
		n, err := Decode(dst, chunk)
		if err != nil || n != f.Nbytes {
			t.Errorf("%s (%s): Decode = %d, %v; want %d", f.Name, f.Note, n, err, f.Nbytes)
			continue
		}
		if sum := sha256.Sum256(dst); hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Errorf("%s (%s): decoded bytes have SHA-256 %x, want %s", f.Name, f.Note, sum, f.SHA256)
			continue
		}
		fr, err := Parse(chunk)
		if err != nil {
			t.Errorf("%s: Parse: %v", f.Name, err)
			continue
		}
		h := fr.Header
		if !h.Memcpyed() {
			seen[h.Compressor()] = true
		}
		if strings.Contains(f.Note, "memcpyed") != h.Memcpyed() {
			t.Errorf("%s (%s): memcpyed = %v", f.Name, f.Note, h.Memcpyed())
		}
		if strings.Contains(f.Note, "far matches") {
			var far int
			for _, s := range fr.Streams {
				if s.Raw {
					continue
				}
				c, err := blosclzTokens(chunk[s.Src : s.Src+s.CSize])
				if err != nil {
					t.Fatalf("%s: %v", f.Name, err)
				}
				far += c.far
			}
			if far == 0 {
				t.Errorf("%s: no far match in its streams; the fixture does not test them", f.Name)
			}
		}
	}
	for _, c := range []Compressor{BloscLZ, LZ4, Snappy, Zlib, Zstd} {
		if !seen[c] {
			t.Errorf("no compressed fixture for %s", c)
		}
	}
}
