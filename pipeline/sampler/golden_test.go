package sampler

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json")

// The golden draws pin the generator: every platform, and every later
// version, must draw these boxes, with these seeds, from these configs. The
// Python client's tests (cmd/damacy/python/tests/test_sampler.py) write the
// same fixture with zarr-python, ask a damacy server for the same samplers
// and compare with this file: keep the two fixtures equal.

// goldenFixture writes the fixture's arrays: img0 (40x30x20) and img1
// (17x50x9), uint8 zeros; lab0, img0's label, 1 in two boxes; lab1,
// img1's label, all 0. Plain zarr v3 arrays, chunks of 8.
func goldenFixture(t *testing.T) map[string]string {
	dir := t.TempDir()
	in := func(c []int64, lo, hi [3]int64) bool {
		return c[0] >= lo[0] && c[0] < hi[0] && c[1] >= lo[1] && c[1] < hi[1] && c[2] >= lo[2] && c[2] < hi[2]
	}
	lab0 := func(c []int64) uint8 {
		if in(c, [3]int64{10, 5, 3}, [3]int64{14, 9, 7}) || in(c, [3]int64{30, 20, 12}, [3]int64{34, 26, 16}) {
			return 1
		}
		return 0
	}
	return map[string]string{
		"img0": writeU8(t, dir, "img0", []int64{40, 30, 20}, nil, zeros),
		"img1": writeU8(t, dir, "img1", []int64{17, 50, 9}, nil, zeros),
		"lab0": writeU8(t, dir, "lab0", []int64{40, 30, 20}, nil, lab0),
		"lab1": writeU8(t, dir, "lab1", []int64{17, 50, 9}, nil, zeros),
	}
}

// goldenCase is one sampler of the golden file and the epoch drawn.
type goldenCase struct {
	name  string
	epoch int64
	cfg   func(p map[string]string) Config
}

var goldenCases = []goldenCase{
	{"uniform_rank0", 3, func(p map[string]string) Config {
		return Config{Arrays: []Array{{URI: p["img0"]}, {URI: p["img1"]}}, Box: []int64{8, 8, 8}, Seed: 12345, World: 2, SamplesPerEpoch: 25}
	}},
	{"uniform_rank1", 3, func(p map[string]string) Config {
		return Config{Arrays: []Array{{URI: p["img0"]}, {URI: p["img1"]}}, Box: []int64{8, 8, 8}, Seed: 12345, Rank: 1, World: 2, SamplesPerEpoch: 25}
	}},
	{"weighted", 0, func(p map[string]string) Config {
		return Config{Arrays: []Array{{URI: p["img0"], Weight: 1}, {URI: p["img1"], Weight: 3}}, Box: []int64{5, 5, 5}, Seed: 1<<63 + 5, SamplesPerEpoch: 10}
	}},
	{"foreground", 1, func(p map[string]string) Config {
		return Config{Kind: Foreground, Arrays: []Array{{URI: p["img0"], Label: p["lab0"]}, {URI: p["img1"], Label: p["lab1"]}}, Box: []int64{6, 6, 6}, Seed: 7, SamplesPerEpoch: 20, Fraction: 0.7}
	}},
	{"grid_rank1", 0, func(p map[string]string) Config {
		return Config{Kind: Grid, Arrays: []Array{{URI: p["img0"]}, {URI: p["img1"]}}, Box: []int64{16, 16, 16}, Overlap: []int64{4}, Rank: 1, World: 3}
	}},
	{"grid_fraction", 0, func(p map[string]string) Config {
		return Config{Kind: Grid, Arrays: []Array{{URI: p["img0"]}}, Box: []int64{16, 16, 16}, OverlapFraction: []float64{0.5}, DropLast: true, World: 4}
	}},
}

// goldenDraw is a draw as the golden file holds it.
type goldenDraw struct {
	Array      int        `json:"array"`
	Index      int64      `json:"index"`
	Box        [][2]int64 `json:"box"`
	Window     []int64    `json:"window"`
	Foreground bool       `json:"foreground"`
	Seed       uint64     `json:"seed"` // Sample.Seed: SampleSeed(epoch, index)
}

// goldenJSON writes the draws one per line, cases in goldenCases' order.
func goldenJSON(t *testing.T, draws map[string][]goldenDraw) []byte {
	b := []byte("{")
	for i, c := range goldenCases {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "\n %q: [", c.name)
		for j, d := range draws[c.name] {
			line, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n  "...)
			b = append(b, line...)
		}
		b = append(b, "\n ]"...)
	}
	return append(b, "\n}\n"...)
}

func TestGolden(t *testing.T) {
	paths := goldenFixture(t)
	got := map[string][]goldenDraw{}
	for _, c := range goldenCases {
		draws := []goldenDraw{}
		for _, d := range all(mustNew(t, c.cfg(paths)), c.epoch) {
			g := goldenDraw{Array: d.Array, Index: d.Index, Window: d.Window, Foreground: d.Foreground, Seed: d.Sample.Seed}
			if want := (uint64(c.epoch)<<40 | uint64(d.Index)) + 1; g.Seed != want {
				t.Errorf("%s: draw %d: seed %d, want (epoch<<40 | index)+1 = %d", c.name, d.Index, g.Seed, want)
			}
			for _, r := range d.Box {
				g.Box = append(g.Box, [2]int64{r.Start, r.Stop})
			}
			draws = append(draws, g)
		}
		got[c.name] = draws
	}
	b := goldenJSON(t, got)
	path := filepath.Join("testdata", "golden.json")
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
	}
	if !bytes.Equal(b, want) {
		var w map[string][]goldenDraw
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		for _, c := range goldenCases {
			g, w := got[c.name], w[c.name]
			for i := range min(len(g), len(w)) {
				b1, _ := json.Marshal(g[i])
				b2, _ := json.Marshal(w[i])
				if !bytes.Equal(b1, b2) {
					t.Errorf("%s: draw %d = %s, want %s", c.name, i, b1, b2)
					break
				}
			}
			if len(g) != len(w) {
				t.Errorf("%s: %d draws, want %d", c.name, len(g), len(w))
			}
		}
		t.Fatal("the draws differ from testdata/golden.json")
	}
}
