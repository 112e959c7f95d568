package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cmd/damacy/internal/bench"
	"github.com/damacy-go/damacy/zarr"
)

// smallGen is gen's arguments for a small mixed dataset: two arrays, two
// dtypes, two codecs.
var smallGen = []string{"gen", "--arrays", "3", "--shape", "24,96,80", "--chunk", "8,32,32", "--shard", "16,64,64",
	"--dtype", "uint8,uint16", "--codec", "zstd,blosc-lz4", "--level", "3"}

// readTree returns every regular file under dir by relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestGenDeterministic(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	_, errs := mustRun(t, append(smallGen, "--seed", "7", "smoke", a)...)
	if !strings.Contains(errs, "wrote 3 images to "+a) {
		t.Errorf("gen summary: %q", errs)
	}
	mustRun(t, append(smallGen, "--seed", "7", "smoke", b)...)
	mustRun(t, append(smallGen, "--seed", "8", "smoke", c)...)
	fa, fb, fc := readTree(t, a), readTree(t, b), readTree(t, c)
	if len(fa) < 3*4 {
		t.Fatalf("gen wrote %d files", len(fa))
	}
	for name, x := range fa {
		if !bytes.Equal(x, fb[name]) {
			t.Errorf("%s differs between two runs with the same seed", name)
		}
	}
	if len(fa) != len(fb) {
		t.Errorf("runs with the same seed wrote %d and %d files", len(fa), len(fb))
	}
	same := 0
	for name, x := range fa {
		if strings.Contains(name, "/c/") && bytes.Equal(x, fc[name]) {
			same++
		}
	}
	if same > 0 {
		t.Errorf("%d shards are the same with seeds 7 and 8", same)
	}

	// The data is what the scenario asks for: the dtypes cycle over the
	// arrays, and about half the voxels are random (entropy 0.5 in smoke).
	for i, want := range []zarr.DataType{zarr.Uint8, zarr.Uint16, zarr.Uint8} {
		m, err := zarr.OpenNGFF(filepath.Join(a, bench.ArrayName(i)))
		if err != nil {
			t.Fatal(err)
		}
		arr, err := m.Level(0)
		if err != nil {
			t.Fatal(err)
		}
		if arr.DataType() != want {
			t.Errorf("%s is %v; want %v", bench.ArrayName(i), arr.DataType(), want)
		}
		reg, err := arr.ReadRegion([]zarr.Range{{Start: 0, Stop: 24}, {Start: 0, Stop: 96}, {Start: 0, Stop: 80}})
		if err != nil {
			t.Fatal(err)
		}
		zero := 0
		es := want.Size()
		for k := 0; k < len(reg.Data); k += es {
			if bytes.Count(reg.Data[k:k+es], []byte{0}) == es {
				zero++
			}
		}
		if frac := float64(zero) / float64(len(reg.Data)/es); frac < 0.45 || frac > 0.6 {
			t.Errorf("%s: %.2f of the voxels are 0; want about half", bench.ArrayName(i), frac)
		}
	}

	// A second gen into the same directory does nothing; a different
	// dataset there is refused.
	_, errs = mustRun(t, append(smallGen, "--seed", "7", "smoke", a)...)
	if !strings.Contains(errs, "already holds this dataset") {
		t.Errorf("gen over the same dataset: %q", errs)
	}
	code, _, errs := runCmd(t, append(smallGen, "--seed", "9", "smoke", a)...)
	if code != exitError || !strings.Contains(errs, "holds a different dataset") {
		t.Errorf("gen over a different dataset = exit %d, %q; want exit 1, refused", code, errs)
	}
}

func TestGenWriterRefusal(t *testing.T) {
	// The writer refuses shards of more than 2^24 chunks; the message names
	// the scenario field.
	dir := t.TempDir()
	code, _, errs := runCmd(t, "gen", "--shape", "8192,8192", "--chunk", "1,1", "--shard", "8192,8192", "smoke", dir)
	want := "damacy gen: error: dataset.shard: holds 67108864 chunks"
	if code != exitError || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("gen with a shard of 2^26 chunks = exit %d, %q; want exit 1, one line starting %q", code, errs, want)
	}
}
