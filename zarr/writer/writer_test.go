package writer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// storeFiles returns every file under dir, by relative path.
func storeFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestSkipEmptyChunks checks which objects are left out when chunks are
// all fill, that rewriting a block with fill removes its object, and that
// the reader sees fill there.
func TestSkipEmptyChunks(t *testing.T) {
	for _, tt := range []struct {
		name    string
		spec    Spec
		want    []string // objects written
		rewrite int      // a block to rewrite as all fill
		after   []string // objects then
	}{
		{"unsharded",
			Spec{Shape: []int64{4, 6}, ChunkShape: []int64{2, 3}, DataType: zarr.Int16, Fill: FillInt(-7), SkipEmptyChunks: true},
			[]string{"c/0/1", "c/1/0", "c/1/1", "zarr.json"},
			1, []string{"c/1/0", "c/1/1", "zarr.json"}},
		{"sharded",
			Spec{Shape: []int64{4, 6}, ChunkShape: []int64{2, 3}, ShardShape: []int64{2, 6}, DataType: zarr.Int16, Fill: FillInt(-7), SkipEmptyChunks: true},
			[]string{"c/0/0", "c/1/0", "zarr.json"},
			0, []string{"c/1/0", "zarr.json"}},
		{"v2",
			Spec{Format: 2, Shape: []int64{4, 6}, ChunkShape: []int64{2, 3}, DataType: zarr.Int16, Fill: FillInt(-7), SkipEmptyChunks: true},
			[]string{".zarray", "0.1", "1.0", "1.1"},
			1, []string{".zarray", "1.0", "1.1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			a, err := Create(dir, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			// Chunk (0, 0) all fill; chunk (0, 1) fill but for one element.
			data := make([]byte, 4*6*2)
			for i := range 24 {
				v := uint64(i + 1)
				if i/6 < 2 {
					v = uint64(0xfff9) // -7
				}
				store(data[2*i:], 2, v)
			}
			store(data[2*5:], 2, 3)
			if err := a.WriteRegion(fullBox(tt.spec.Shape), data); err != nil {
				t.Fatal(err)
			}
			if got := sortedKeys(storeFiles(t, dir)); !slices.Equal(got, tt.want) {
				t.Errorf("objects %q; want %q", got, tt.want)
			}
			checkRead(t, dir, tt.spec.Shape, data)
			// Rewrite a stored block with nothing but fill.
			var box []zarr.Range
			for i, b := range a.Blocks() {
				if i == tt.rewrite {
					box = b
				}
			}
			block := make([]byte, boxBytes(box, 2))
			for i := 0; i < len(block); i += 2 {
				store(block[i:], 2, 0xfff9)
			}
			if err := a.WriteRegion(box, block); err != nil {
				t.Fatal(err)
			}
			if got := sortedKeys(storeFiles(t, dir)); !slices.Equal(got, tt.after) {
				t.Errorf("after rewriting block %d as fill: objects %q; want %q", tt.rewrite, got, tt.after)
			}
		})
	}
}

// checkRead reads the whole array at dir with package zarr and compares.
func checkRead(t *testing.T, dir string, shape []int64, want []byte) {
	t.Helper()
	r, err := zarr.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := r.ReadRegion(fullBox(shape))
	if err != nil {
		t.Fatal(err)
	}
	if string(reg.Data) != string(want) {
		t.Errorf("read %x; want %x", reg.Data, want)
	}
}

// TestWriteRegionBad checks that regions that are not whole blocks, or
// whose data has the wrong size, are refused before anything is written.
func TestWriteRegionBad(t *testing.T) {
	spec := Spec{Shape: []int64{10, 9}, ChunkShape: []int64{2, 3}, ShardShape: []int64{4, 6}, DataType: zarr.Uint8}
	dir := t.TempDir()
	a, err := Create(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		box []zarr.Range
		n   int
	}{
		{[]zarr.Range{rg(0, 4)}, 4},
		{[]zarr.Range{rg(0, 4), rg(0, 3)}, 12},  // stops inside a shard
		{[]zarr.Range{rg(2, 4), rg(0, 6)}, 12},  // starts inside a shard
		{[]zarr.Range{rg(8, 12), rg(0, 6)}, 24}, // beyond the array
		{[]zarr.Range{rg(-4, 0), rg(0, 6)}, 24}, // negative
		{[]zarr.Range{rg(4, 4), rg(0, 6)}, 0},   // empty
		{[]zarr.Range{rg(8, 10), rg(6, 9)}, 5},  // short data
		{[]zarr.Range{rg(0, 10), rg(0, 9)}, 91}, // long data
		{[]zarr.Range{rg(0, 4), rg(0, 6), rg(0, 1)}, 24},
	} {
		if err := a.WriteRegion(c.box, make([]byte, c.n)); !errors.Is(err, ErrInvalid) {
			t.Errorf("WriteRegion(%v, %d bytes) = %v; want ErrInvalid", c.box, c.n, err)
		}
	}
	if got := sortedKeys(storeFiles(t, dir)); !slices.Equal(got, []string{"zarr.json"}) {
		t.Errorf("refused writes left objects: %q", got)
	}
	// The edge shard, which stops at the array's end, is whole.
	if err := a.WriteRegion([]zarr.Range{rg(8, 10), rg(6, 9)}, make([]byte, 6)); err != nil {
		t.Errorf("WriteRegion of the corner shard: %v", err)
	}
}

// TestDeterministic writes the same spec and seed several ways (one
// goroutine, many, WriteRegion pieces written concurrently, one
// WriteRegion) and requires byte-identical stores, with no temporary files
// left behind.
func TestDeterministic(t *testing.T) {
	seed := testSeed(t)
	for _, c := range []Compression{
		{Codec: Zstd, Level: 5, Checksum: true},
		{Codec: Gzip, Level: 4},
		{Codec: LZ4},
		{Codec: Blosc, Level: 7, BloscCompressor: blosc.Zstd, Shuffle: blosc.BitShuffle},
		{Codec: Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.ByteShuffle},
	} {
		spec := Spec{Shape: []int64{30, 40, 50}, ChunkShape: []int64{8, 8, 16}, ShardShape: []int64{16, 16, 32},
			DataType: zarr.Float32, Compression: c, SkipEmptyChunks: true}
		synth := &Synth{Seed: seed, DataType: spec.DataType, Shape: spec.Shape, Amplitude: 0.8, NoiseBits: 12, RandomFraction: 0.1}
		var stores []map[string][]byte
		for way := range 4 {
			dir := t.TempDir()
			a, err := Create(dir, spec)
			if err != nil {
				t.Fatal(err)
			}
			switch way {
			case 0, 1:
				err = a.WriteFrom(context.Background(), 1+7*way, synth.Fill)
			case 2:
				var wg sync.WaitGroup
				errs := make([]error, a.NumBlocks())
				for i, box := range a.Blocks() {
					wg.Go(func() {
						buf := make([]byte, boxBytes(box, 4))
						if errs[i] = synth.Fill(buf, box); errs[i] == nil {
							errs[i] = a.WriteRegion(box, buf)
						}
					})
				}
				wg.Wait()
				err = errors.Join(errs...)
			case 3:
				buf := make([]byte, product(spec.Shape)*4)
				if err = synth.Fill(buf, fullBox(spec.Shape)); err == nil {
					err = a.WriteRegion(fullBox(spec.Shape), buf)
				}
			}
			if err != nil {
				t.Fatalf("%s, way %d: %v", compressionName(c), way, err)
			}
			stores = append(stores, storeFiles(t, dir))
		}
		for way, s := range stores {
			for name := range s {
				if strings.HasSuffix(name, ".tmp") {
					t.Errorf("%s, way %d: temporary file %s left", compressionName(c), way, name)
				}
			}
			if way == 0 {
				if len(s) != 1+2*3*2 {
					t.Errorf("%s: %d files; want the metadata and 12 shards", compressionName(c), len(s))
				}
				continue
			}
			if !maps.EqualFunc(s, stores[0], bytes.Equal) {
				t.Errorf("%s: way %d wrote different bytes than way 0", compressionName(c), way)
			}
		}
	}
}

// TestZstdFrames checks that every zstd chunk is one frame that declares
// its content size, which GPU decoders need.
func TestZstdFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 5))
	spec := Spec{Shape: []int64{64, 64}, ChunkShape: []int64{16, 32}, ShardShape: []int64{32, 64}, DataType: zarr.Uint16,
		Compression: Compression{Codec: Zstd, Level: 3}}
	dir := t.TempDir()
	a, err := Create(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	data := randomData(rng, spec.DataType, spec.Shape, 0)
	if err := a.WriteRegion(fullBox(spec.Shape), data); err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for name, shard := range storeFiles(t, dir) {
		if name == "zarr.json" {
			continue
		}
		n := 4 // chunks per shard
		index := shard[len(shard)-16*n-4:]
		for i := range n {
			off := binary.LittleEndian.Uint64(index[16*i:])
			size := binary.LittleEndian.Uint64(index[16*i+8:])
			frame := shard[off : off+size]
			if got := binary.LittleEndian.Uint32(frame); got != 0xFD2FB528 {
				t.Fatalf("%s chunk %d: magic %#x", name, i, got)
			}
			fhd := frame[4]
			if fhd>>6 == 0 && fhd>>5&1 == 0 {
				t.Errorf("%s chunk %d: frame header %#x declares no content size", name, i, fhd)
			}
			chunks++
		}
	}
	if chunks != 8 {
		t.Errorf("checked %d chunks; want 8", chunks)
	}
	checkRead(t, dir, spec.Shape, data)
}

// TestWriteFromStops checks that WriteFrom returns the first error of its
// source, and ctx's error when it is cancelled.
func TestWriteFromStops(t *testing.T) {
	spec := Spec{Shape: []int64{64, 64}, ChunkShape: []int64{8, 8}, DataType: zarr.Uint8}
	a, err := Create(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var mu sync.Mutex
	calls := 0
	err = a.WriteFrom(context.Background(), 4, func(dst []byte, box []zarr.Range) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("WriteFrom with a failing source = %v; want boom", err)
	}
	if calls >= a.NumBlocks() {
		t.Errorf("the source was called %d times after failing; want fewer than %d", calls, a.NumBlocks())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.WriteFrom(ctx, 2, func([]byte, []zarr.Range) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteFrom with a cancelled context = %v; want context.Canceled", err)
	}
}

// TestBlocks checks the block regions: C order, clipped at the edges,
// covering the array once.
func TestBlocks(t *testing.T) {
	a, err := Create(t.TempDir(), Spec{Shape: []int64{5, 7}, ChunkShape: []int64{1, 2}, ShardShape: []int64{3, 4}, DataType: zarr.Uint8})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]zarr.Range
	for i, b := range a.Blocks() {
		if i != len(got) {
			t.Fatalf("block index %d; want %d", i, len(got))
		}
		got = append(got, b)
	}
	want := [][]zarr.Range{
		{rg(0, 3), rg(0, 4)}, {rg(0, 3), rg(4, 7)},
		{rg(3, 5), rg(0, 4)}, {rg(3, 5), rg(4, 7)},
	}
	if a.NumBlocks() != 4 || !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("NumBlocks %d, Blocks %v; want 4, %v", a.NumBlocks(), got, want)
	}
}

// TestLargeValues writes extreme values of every type through every
// layout, where a conversion bug would show: NaN payloads, infinities,
// the integer limits, -0.
func TestLargeValues(t *testing.T) {
	for _, dt := range allTypes {
		ti, _ := infoOf(dt)
		var vals []uint64
		switch ti.kind {
		case kindBool:
			vals = []uint64{0, 1}
		case kindFloat:
			vals = []uint64{ti.canonicalNaN() | 1, ti.mask(), ti.mask() >> 1, 1 << (8*ti.size - 1), ti.fromFloat64(math.Inf(1)), ti.fromFloat64(math.Inf(-1)), 1}
		default:
			vals = []uint64{0, ti.mask(), ti.mask() >> 1, 1 << (8*ti.size - 1), 1}
		}
		shape := []int64{int64(len(vals)) * 3}
		data := make([]byte, int(shape[0])*ti.size)
		for i := range shape[0] {
			store(data[int(i)*ti.size:], ti.size, vals[int(i)%len(vals)])
		}
		for _, lay := range testLayouts {
			spec := Spec{Shape: shape, ChunkShape: []int64{2}, DataType: dt, Compression: Compression{Codec: Zstd}}
			lay.set(&spec, spec.ChunkShape)
			dir := t.TempDir()
			a, err := Create(dir, spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.WriteRegion(fullBox(shape), data); err != nil {
				t.Fatal(err)
			}
			checkRead(t, dir, shape, data)
		}
	}
}

func rg(start, stop int64) zarr.Range { return zarr.Range{Start: start, Stop: stop} }
