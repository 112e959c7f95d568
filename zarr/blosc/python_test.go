package blosc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// mustHavePython returns the cross-check interpreter, or skips the test
// (fails it when DAMACY_REQUIRE_PYTHON=1).
func mustHavePython(t testing.TB) string {
	t.Helper()
	return zarrtest.MustHavePython(t, "numpy", "numcodecs", "tensorstore")
}

func runPython(t *testing.T, py string, args ...string) {
	t.Helper()
	cmd := exec.Command(py, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", py, args, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

type manifestEntry struct {
	Name      string `json:"name"`
	Writer    string `json:"writer,omitempty"`
	Cname     string `json:"cname"`
	Clevel    int    `json:"clevel"`
	Shuffle   int    `json:"shuffle"`
	Typesize  int    `json:"typesize"`
	Blocksize int    `json:"blocksize"`
	Nbytes    int    `json:"nbytes"`
}

func readManifest(t *testing.T, dir string) []manifestEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m []manifestEntry
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func readPair(t *testing.T, dir, name string) (frame, raw []byte) {
	t.Helper()
	frame, err := os.ReadFile(filepath.Join(dir, name+".blosc"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err = os.ReadFile(filepath.Join(dir, name+".raw"))
	if err != nil {
		t.Fatal(err)
	}
	return frame, raw
}

// TestDecodeForeignChunks decodes chunks that numcodecs and tensorstore write
// for every codec, shuffle and several typesizes and blocksizes, on fresh
// data, and compares them to their input byte for byte, through Decode and
// through Parse + stream decoding + Unshuffle/BitUnshuffle.
func TestDecodeForeignChunks(t *testing.T) {
	py := mustHavePython(t)
	dir := t.TempDir()
	seed := time.Now().UnixNano() % 1e9
	t.Logf("seed %d", seed)
	runPython(t, py, filepath.Join("testdata", "gen_blosc.py"), dir, strconv.FormatInt(seed, 10))
	m := readManifest(t, dir)
	if len(m) < 500 {
		t.Fatalf("manifest lists %d chunks, want hundreds", len(m))
	}
	seen := map[string]bool{}
	for _, e := range m {
		frame, raw := readPair(t, dir, e.Name)
		h, err := ParseHeader(frame)
		if err != nil {
			t.Errorf("%s: ParseHeader: %v", e.Name, err)
			continue
		}
		seen[fmt.Sprintf("%s/%s/memcpyed=%v", h.Compressor(), h.Shuffle(), h.Memcpyed())] = true
		checkDecodes(t, e.Name, frame, raw)
	}
	// The generator must have reached every codec with every shuffle.
	for _, c := range []Compressor{BloscLZ, LZ4, Snappy, Zlib, Zstd} {
		for _, s := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
			if k := fmt.Sprintf("%s/%s/memcpyed=false", c, s); !seen[k] {
				t.Errorf("no compressed chunk with %s", k)
			}
		}
	}
	if !seen["blosclz/noshuffle/memcpyed=true"] && !seen["lz4/noshuffle/memcpyed=true"] {
		t.Errorf("no memcpyed chunk among %v", seen)
	}
}

// checkDecodes decodes frame every way the package offers and compares the
// output with raw.
func checkDecodes(t *testing.T, name string, frame, raw []byte) {
	t.Helper()
	dst := make([]byte, len(raw)+7)
	n, err := Decode(dst, frame)
	if err != nil {
		t.Errorf("%s: Decode: %v", name, err)
		return
	}
	if n != len(raw) || !bytes.Equal(dst[:n], raw) {
		t.Errorf("%s: Decode = %d bytes, differing from the %d input bytes at %d", name, n, len(raw), firstDiff(dst[:n], raw))
		return
	}
	if former, err := formerDecode(frame); err != nil || !bytes.Equal(former, raw) {
		t.Errorf("%s: the former decoders: %v, differ from the input at %d", name, err, firstDiff(former, raw))
		return
	}
	f, err := Parse(frame)
	if err != nil {
		t.Errorf("%s: Parse: %v", name, err)
		return
	}
	shuffled := make([]byte, len(raw))
	if _, err := DecodeNoUnshuffle(shuffled, frame); err != nil {
		t.Errorf("%s: DecodeNoUnshuffle: %v", name, err)
		return
	}
	// Decode the streams one by one, as a GPU path would.
	byStream := make([]byte, len(raw))
	d, _ := shared()
	covered := 0
	for _, s := range f.Streams {
		if err := d.stream(byStream[s.Dst:s.Dst+s.Size], frame[s.Src:s.Src+s.CSize], f.Header, s); err != nil {
			t.Errorf("%s: stream %+v: %v", name, s, err)
			return
		}
		covered += s.Size
	}
	if covered != len(raw) || !bytes.Equal(byStream, shuffled) {
		t.Errorf("%s: streams cover %d of %d bytes; stream-wise output equals DecodeNoUnshuffle: %v", name, covered, len(raw), bytes.Equal(byStream, shuffled))
		return
	}
	h := f.Header
	un := make([]byte, len(raw))
	switch h.Shuffle() {
	case NoShuffle:
		copy(un, shuffled)
	case ByteShuffle:
		err = Unshuffle(un, shuffled, h.Typesize, h.Blocksize, h.Nbytes)
	case BitShuffle:
		err = BitUnshuffle(un, shuffled, h.Typesize, h.Blocksize, h.Nbytes)
	}
	if err != nil || !bytes.Equal(un, raw) {
		t.Errorf("%s: %s of DecodeNoUnshuffle: err %v, differs from input at %d", name, h.Shuffle(), err, firstDiff(un, raw))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

type pyResult struct {
	Name         string `json:"name"`
	Numcodecs    string `json:"numcodecs"`
	Tensorstore  string `json:"tensorstore"`
	RefBlocksize *int   `json:"ref_blocksize"`
	RefFlags     *int   `json:"ref_flags"`
}

// TestEncodeReadByPython encodes fresh data with every codec, shuffle,
// several typesizes and blocksizes, and has numcodecs and tensorstore decode
// the chunks. It also checks that the blocksize and flags we choose are the
// ones numcodecs' c-blosc chooses for the same parameters.
func TestEncodeReadByPython(t *testing.T) {
	py := mustHavePython(t)
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var m []manifestEntry
	add := func(o Options, raw []byte) {
		name := fmt.Sprintf("go-%s-s%d-t%d-n%d-b%d-l%d-%d", o.Compressor, o.Shuffle, o.Typesize, len(raw), o.Blocksize, o.Level, len(m))
		frame, err := Encode(raw, o)
		if err != nil {
			t.Fatalf("%s: Encode: %v", name, err)
		}
		for suffix, b := range map[string][]byte{".blosc": frame, ".raw": raw} {
			if err := os.WriteFile(filepath.Join(dir, name+suffix), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m = append(m, manifestEntry{Name: name, Cname: o.Compressor.String(), Clevel: o.Level, Shuffle: int(o.Shuffle),
			Typesize: o.Typesize, Blocksize: o.Blocksize, Nbytes: len(raw)})
	}
	for c := BloscLZ; c <= Zstd; c++ {
		for s := NoShuffle; s <= BitShuffle; s++ {
			for _, ts := range []int{1, 2, 3, 4, 8, 16, 24} {
				for _, tc := range []struct{ nelem, blocksize, level int }{
					{10, 0, 5}, {999, 0, 5}, {1237, 512, 3}, {5000, 0, 9}, {3001, 4096, 1}, {20000, 0, 7},
				} {
					raw := smoothData(rng, tc.nelem*ts, ts)
					add(Options{Compressor: c, Level: tc.level, Shuffle: s, Typesize: ts, Blocksize: tc.blocksize}, raw)
				}
				add(Options{Compressor: c, Level: 5, Shuffle: s, Typesize: ts}, randomData(rng, 3000*ts))
			}
		}
		add(Options{Compressor: c, Level: 5, Typesize: 1}, farData(rng, 60000))
		add(Options{Compressor: c, Level: 5, Shuffle: ByteShuffle, Typesize: 4}, []byte{})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPython(t, py, filepath.Join("testdata", "check_blosc.py"), dir)
	rb, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var results []pyResult
	if err := json.Unmarshal(rb, &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != len(m) {
		t.Fatalf("%d results for %d chunks", len(results), len(m))
	}
	decodedBy := map[string]int{}
	for i, r := range results {
		for _, got := range []struct{ who, res string }{{"numcodecs", r.Numcodecs}, {"tensorstore", r.Tensorstore}} {
			switch {
			case got.res == "ok":
				decodedBy[got.who]++
			case len(got.res) >= 8 && got.res[:8] == "skipped:":
			default:
				t.Errorf("%s: %s: %s", r.Name, got.who, got.res)
			}
		}
		if r.RefBlocksize == nil {
			continue
		}
		frame, _ := readPair(t, dir, r.Name)
		h, err := ParseHeader(frame)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if h.Blocksize != *r.RefBlocksize || h.Flags&^flagMemcpyed != uint8(*r.RefFlags)&^flagMemcpyed {
			t.Errorf("%s (%+v): blocksize %d, flags %#02x; numcodecs chose %d, %#02x",
				r.Name, m[i], h.Blocksize, h.Flags, *r.RefBlocksize, *r.RefFlags)
		}
	}
	t.Logf("%d chunks; decoded by numcodecs %d, by tensorstore %d", len(m), decodedBy["numcodecs"], decodedBy["tensorstore"])
}
