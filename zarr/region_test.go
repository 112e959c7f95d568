package zarr

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/fstest"
)

// regionCase is an array layout for the random-box tests, with an oracle
// for which elements were never stored.
type regionCase struct {
	name    string
	arr     tarray
	v2      *v2Layout // write zarr v2 instead of v3
	missing func(p []int64) bool
}

// v2Layout describes a zarr v2 array for the test writer.
type v2Layout struct {
	typestr    string
	order      string
	sep        string
	compressor string // JSON or "null"
	fill       string
}

// cellOf reports whether position p lies in a grid cell (of shape cs)
// for which skip is true.
func cellOf(p, cs []int64, skip func(g []int64) bool) bool {
	g := make([]int64, len(p))
	for k := range p {
		g[k] = p[k] / cs[k]
	}
	return skip(g)
}

// hashSkip returns a deterministic pseudo-random cell predicate hitting
// about one cell in n.
func hashSkip(seed uint64, n int) func(g []int64) bool {
	return func(g []int64) bool {
		h := seed
		for _, v := range g {
			h = (h ^ uint64(v)) * 0x100000001b3
		}
		return h%uint64(n) == 0
	}
}

func regionCases(seed uint64) []regionCase {
	skipShard := hashSkip(seed, 4)
	skipInner := hashSkip(seed+1, 3)
	skipMid := hashSkip(seed+2, 4)
	zs := zstdCodecT(true, false, false)
	var cases []regionCase

	unsharded := tarray{shape: []int64{23, 17, 30}, chunk: []int64{5, 8, 7}, dt: Uint16, fill: "42",
		chain: &tchain{bb: []tcodec{zs}}, skip: skipShard}
	cases = append(cases, regionCase{name: "unsharded", arr: unsharded,
		missing: func(p []int64) bool { return cellOf(p, unsharded.chunk, skipShard) }})

	dotKeys := unsharded
	dotKeys.keys = `{"name":"default","configuration":{"separator":"."}}`
	dotKeys.dt, dotKeys.fill = Int64, "-7"
	cases = append(cases, regionCase{name: "dot-keys-int64", arr: dotKeys,
		missing: func(p []int64) bool { return cellOf(p, dotKeys.chunk, skipShard) }})

	v2keys := unsharded
	v2keys.keys = `{"name":"v2","configuration":{"separator":"."}}`
	v2keys.chain = &tchain{perm: []int{1, 2, 0}, endian: BigEndian, bb: []tcodec{lz4T}}
	cases = append(cases, regionCase{name: "v2-keys-transpose-lz4", arr: v2keys,
		missing: func(p []int64) bool { return cellOf(p, v2keys.chunk, skipShard) }})

	shardEnd := tarray{shape: []int64{37, 45, 29}, chunk: []int64{16, 16, 12}, dt: Float32, fill: `"NaN"`,
		chain: &tchain{shard: &tshard{chunk: []int64{4, 8, 6}, inner: &tchain{endian: BigEndian, bb: []tcodec{zs}}, empty: skipInner}},
		skip:  skipShard}
	cases = append(cases, regionCase{name: "sharded-end", arr: shardEnd, missing: shardMissing(shardEnd.chunk, []int64{4, 8, 6}, skipShard, skipInner)})

	shardStart := shardEnd
	shardStart.dt, shardStart.fill = Int8, "-1"
	shardStart.chain = &tchain{shard: &tshard{chunk: []int64{4, 8, 6}, atStart: true, noCRC: true,
		inner: &tchain{bb: []tcodec{bloscT("lz4", 1, 1)}}, empty: skipInner}}
	cases = append(cases, regionCase{name: "sharded-start-blosc", arr: shardStart, missing: shardMissing(shardStart.chunk, []int64{4, 8, 6}, skipShard, skipInner)})

	nested := tarray{shape: []int64{40, 33, 35}, chunk: []int64{16, 16, 16}, dt: Uint32, fill: "123456",
		chain: &tchain{shard: &tshard{chunk: []int64{8, 8, 8}, empty: skipMid,
			inner: &tchain{shard: &tshard{chunk: []int64{4, 2, 8}, atStart: true, empty: skipInner,
				inner: &tchain{endian: LittleEndian, bb: []tcodec{gzipT}}}}}},
		skip: skipShard}
	cases = append(cases, regionCase{name: "nested-sharding", arr: nested, missing: func(p []int64) bool {
		if cellOf(p, nested.chunk, skipShard) {
			return true
		}
		q := make([]int64, len(p))
		for k := range p {
			q[k] = p[k] % 16
		}
		if cellOf(q, []int64{8, 8, 8}, skipMid) {
			return true
		}
		for k := range p {
			q[k] = p[k] % 8
		}
		return cellOf(q, []int64{4, 2, 8}, skipInner)
	}})

	// A shard wrapped in other codecs decodes whole, through the index.
	wrapped := tarray{shape: []int64{21, 30}, chunk: []int64{8, 12}, dt: Float16, fill: `"0x7c01"`,
		chain: &tchain{perm: []int{1, 0}, shard: &tshard{chunk: []int64{4, 4}, empty: skipInner,
			inner: &tchain{endian: BigEndian}}, bb: []tcodec{zs, crc32cT}},
		skip: skipShard}
	cases = append(cases, regionCase{name: "wrapped-shard", arr: wrapped, missing: func(p []int64) bool {
		if cellOf(p, wrapped.chunk, skipShard) {
			return true
		}
		// The sharding codec sees the transposed shard (12 x 8).
		q := []int64{p[1] % 12, p[0] % 8}
		return cellOf(q, []int64{4, 4}, skipInner)
	}})

	oneD := tarray{shape: []int64{1000}, chunk: []int64{100}, dt: Float64, fill: "2.5",
		chain: &tchain{shard: &tshard{chunk: []int64{25}, inner: &tchain{bb: []tcodec{zlibT}}, empty: skipInner}}, skip: skipShard}
	cases = append(cases, regionCase{name: "1-d", arr: oneD, missing: shardMissing(oneD.chunk, []int64{25}, skipShard, skipInner)})

	fiveD := tarray{shape: []int64{2, 3, 7, 9, 11}, chunk: []int64{1, 2, 4, 4, 8}, dt: Bool, fill: "true",
		chain: &tchain{perm: []int{4, 3, 2, 1, 0}, bb: []tcodec{lz4T}}, skip: skipShard}
	cases = append(cases, regionCase{name: "5-d-bool", arr: fiveD, missing: func(p []int64) bool { return cellOf(p, fiveD.chunk, skipShard) }})

	zeroD := tarray{shape: []int64{}, chunk: []int64{}, dt: Int32, fill: "9", chain: &tchain{bb: []tcodec{zs}}}
	cases = append(cases, regionCase{name: "0-d", arr: zeroD})

	emptyAxis := tarray{shape: []int64{0, 5}, chunk: []int64{3, 3}, dt: Uint8, fill: "3", chain: &tchain{}}
	cases = append(cases, regionCase{name: "zero-extent", arr: emptyAxis})

	for _, order := range []string{"C", "F"} {
		for _, sep := range []string{".", "/"} {
			v2 := tarray{shape: []int64{19, 26, 11}, chunk: []int64{7, 5, 4}, dt: Int16, skip: skipShard,
				chain: &tchain{endian: BigEndian, bb: []tcodec{zstdCodecT(false, false, false)}}}
			if order == "F" {
				v2.chain.perm = []int{2, 1, 0}
			}
			cases = append(cases, regionCase{name: "v2-" + order + sep, arr: v2,
				v2:      &v2Layout{typestr: ">i2", order: order, sep: sep, compressor: `{"id":"zstd","level":3}`, fill: "-5"},
				missing: func(p []int64) bool { return cellOf(p, v2.chunk, skipShard) }})
		}
	}
	return cases
}

// shardMissing returns the missing-element oracle of a one-level sharded
// array.
func shardMissing(shard, inner []int64, skipShard, skipInner func([]int64) bool) func(p []int64) bool {
	return func(p []int64) bool {
		if cellOf(p, shard, skipShard) {
			return true
		}
		q := make([]int64, len(p))
		for k := range p {
			q[k] = p[k] % shard[k]
		}
		return cellOf(q, inner, skipInner)
	}
}

// writeV2 writes a as a zarr v2 array under path.
func writeV2(t *testing.T, fsys fstest.MapFS, path string, a *tarray, l *v2Layout, data []byte) {
	t.Helper()
	shape, _ := json.Marshal(a.shape)
	chunks, _ := json.Marshal(a.chunk)
	meta := fmt.Sprintf(`{"zarr_format":2,"shape":%s,"chunks":%s,"dtype":%q,"compressor":%s,"fill_value":%s,"order":%q,"filters":null,"dimension_separator":%q}`,
		shape, chunks, l.typestr, l.compressor, l.fill, l.order, l.sep)
	fsys[joinKey(path, ".zarray")] = &fstest.MapFile{Data: []byte(meta)}
	m, err := ParseArrayMetadataV2([]byte(meta))
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.resolve("")
	if err != nil {
		t.Fatal(err)
	}
	grid := make([]int64, len(a.shape))
	for i := range grid {
		grid[i] = (a.shape[i] + a.chunk[i] - 1) / a.chunk[i]
	}
	g := make([]int64, len(grid))
	for i := int64(0); i < prod(grid); i++ {
		gridCoord(g, i, grid)
		if a.skip != nil && a.skip(g) {
			continue
		}
		origin := make([]int64, len(g))
		for k := range g {
			origin[k] = g[k] * a.chunk[k]
		}
		chunk := extract(data, a.shape, origin, a.chunk, a.dt.Size(), info.fill)
		fsys[joinKey(path, info.keys.key(g))] = &fstest.MapFile{Data: a.chain.encode(t, chunk, a.chunk, a.dt, info.fill)}
	}
}

// TestReadRegionRandom reads many random boxes, inside, across and
// outside the array, from each layout and compares them with boxes cut
// from the source array.
func TestReadRegionRandom(t *testing.T) {
	seed := uint64(testSeed(t))
	rng := rand.New(rand.NewPCG(seed, 5))
	boxes := 150
	if testing.Short() {
		boxes = 30
	}
	for _, rc := range regionCases(seed) {
		t.Run(rc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			data := randArray(rng, rc.arr.dt, prod(rc.arr.shape))
			if rc.v2 != nil {
				writeV2(t, fsys, "a", &rc.arr, rc.v2, data)
			} else {
				rc.arr.write(t, fsys, "a", data)
			}
			a := openMap(t, fsys, "a")
			checkRegion(t, a, data, boxOf(a.Shape(), 0, 0), rc.missing)
			for range boxes {
				checkRegion(t, a, data, randomBox(rng, a.Shape()), rc.missing)
			}
		})
	}
}

// boxOf returns the box covering shape, grown by lo before and hi after.
func boxOf(shape []int64, lo, hi int64) []Range {
	b := make([]Range, len(shape))
	for k, n := range shape {
		b[k] = Range{-lo, n + hi}
	}
	return b
}

// randomBox returns a box that usually overlaps the array and sometimes
// reaches past either end or lies wholly outside.
func randomBox(rng *rand.Rand, shape []int64) []Range {
	b := make([]Range, len(shape))
	for k, n := range shape {
		ext := rng.Int64N(min(n, 24)+3) + 1
		if rng.IntN(20) == 0 {
			ext = 0
		}
		start := rng.Int64N(n+ext+4) - ext - 2
		b[k] = Range{start, start + ext}
	}
	return b
}

// TestPlanTiles checks the structure of plans: copies tile the box exactly
// once, chunks are sorted and unique, and every copy lies inside its chunk.
func TestPlanTiles(t *testing.T) {
	seed := uint64(testSeed(t))
	rng := rand.New(rand.NewPCG(seed, 6))
	for _, rc := range regionCases(seed) {
		t.Run(rc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			data := randArray(rng, rc.arr.dt, prod(rc.arr.shape))
			if rc.v2 != nil {
				writeV2(t, fsys, "a", &rc.arr, rc.v2, data)
			} else {
				rc.arr.write(t, fsys, "a", data)
			}
			a := openMap(t, fsys, "a")
			for range 30 {
				box := randomBox(rng, a.Shape())
				p, err := a.Plan(box, nil)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, a, p)
			}
		})
	}
}

func checkPlan(t *testing.T, a *Array, p *Plan) {
	t.Helper()
	cover := make([]int, prod(p.Shape))
	box := cLayout(p.Shape, Uint8)
	for i := 1; i < len(p.Chunks); i++ {
		x, y := p.Chunks[i-1], p.Chunks[i]
		if x.Key > y.Key || x.Key == y.Key && x.Offset >= y.Offset {
			t.Fatalf("chunks %d and %d out of order: %s@%d, %s@%d", i-1, i, x.Key, x.Offset, y.Key, y.Offset)
		}
	}
	for _, c := range p.Chunks {
		if !c.Codec.Leaf() {
			t.Fatalf("chunk %s@%d has a non-leaf codec", c.Key, c.Offset)
		}
		if c.Length < 0 || c.Offset < 0 {
			t.Fatalf("chunk %s has range %d+%d", c.Key, c.Offset, c.Length)
		}
	}
	for _, op := range p.Copies {
		if op.Chunk >= 0 {
			l := p.Chunks[op.Chunk].Codec.Layout()
			for k := range op.Shape {
				if op.Src[k] < 0 || op.Src[k]+op.Shape[k] > l.Shape[k] {
					t.Fatalf("copy %+v reaches outside its chunk of shape %v", op, l.Shape)
				}
			}
		}
		ext := slices.Clone(op.Shape)
		c := make([]int64, len(ext))
		for i := int64(0); i < prod(ext); i++ {
			gridCoord(c, i, ext)
			off := int64(0)
			for k := range c {
				off += (op.Dst[k] + c[k]) * box.Strides[k]
			}
			cover[off]++
		}
	}
	for i, n := range cover {
		if n != 1 {
			t.Fatalf("box element %d is written %d times", i, n)
		}
	}
}
