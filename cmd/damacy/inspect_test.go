package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files of the inspect tests")

// makeStores writes the test stores into dir, from fixed seeds, so that
// their bytes (and inspect's report of them) are the same on every run:
//
//   - image.ome.zarr: an OME-NGFF 0.5 image, 2 levels, uint16, zstd,
//     sharded with the index at the start;
//   - plain.zarr: a v3 float32 array, big-endian, unsharded, blosc lz4 with
//     bit shuffle, NaN fill, only some chunks written;
//   - v2.zarr: a zarr v2 int16 array, big-endian, order F, gzip, fill -7.
func makeStores(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	m, err := writer.CreateNGFF(filepath.Join(dir, "image.ome.zarr"), writer.NGFFSpec{
		Name: "test image",
		Axes: []writer.Axis{
			{Name: "z", Type: "space", Unit: "micrometer"},
			{Name: "y", Type: "space", Unit: "micrometer"},
			{Name: "x", Type: "space", Unit: "micrometer"},
		},
		Levels: 2,
		Scale:  []float64{2, 0.5, 0.5},
		Array: writer.Spec{
			Shape: []int64{20, 40, 36}, ChunkShape: []int64{8, 16, 16}, ShardShape: []int64{16, 32, 32},
			IndexAtStart: true, DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	syn := &writer.Synth{Seed: 11, DataType: zarr.Uint16, Shape: []int64{20, 40, 36}, Amplitude: 0.5, NoiseBits: 6, RandomFraction: 0.1}
	if err := m.Level(0).WriteFrom(ctx, 2, syn.Fill); err != nil {
		t.Fatal(err)
	}
	if err := m.Downsample(ctx, 2); err != nil {
		t.Fatal(err)
	}

	a, err := writer.Create(filepath.Join(dir, "plain.zarr"), writer.Spec{
		Shape: []int64{30, 50}, ChunkShape: []int64{8, 16}, DataType: zarr.Float32, BigEndian: true,
		Compression: writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.BitShuffle},
		Fill:        writer.FillFloat(nanValue()),
	})
	if err != nil {
		t.Fatal(err)
	}
	box := []zarr.Range{{Start: 0, Stop: 16}, {Start: 16, Stop: 48}}
	buf := make([]byte, 16*32*4)
	fs := &writer.Synth{Seed: 12, DataType: zarr.Float32, Shape: []int64{30, 50}, Amplitude: 1, NoiseBits: 8}
	if err := fs.Fill(buf, box); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteRegion(box, buf); err != nil {
		t.Fatal(err)
	}

	v2, err := writer.Create(filepath.Join(dir, "v2.zarr"), writer.Spec{
		Format: 2, Shape: []int64{17, 23}, ChunkShape: []int64{5, 7}, DataType: zarr.Int16, BigEndian: true, Order: 'F',
		Compression: writer.Compression{Codec: writer.Gzip, Level: 5}, Fill: writer.FillInt(-7),
	})
	if err != nil {
		t.Fatal(err)
	}
	is := &writer.Synth{Seed: 13, DataType: zarr.Int16, Shape: []int64{17, 23}, Amplitude: 0.3, NoiseBits: 4, RandomFraction: 0.2}
	if err := v2.WriteFrom(ctx, 2, is.Fill); err != nil {
		t.Fatal(err)
	}
}

func nanValue() float64 {
	var zero float64
	return zero / zero
}

func TestInspectGolden(t *testing.T) {
	dir := t.TempDir()
	makeStores(t, dir)
	for _, name := range []string{"image.ome.zarr", "image.ome.zarr/1", "plain.zarr", "v2.zarr"} {
		for _, asJSON := range []bool{false, true} {
			args := []string{"inspect", filepath.Join(dir, name)}
			golden := filepath.Join("testdata", "inspect", strings.ReplaceAll(name, "/", "_")+".txt")
			if asJSON {
				args = append(args, "--json")
				golden = strings.TrimSuffix(golden, ".txt") + ".json"
			}
			out, _ := mustRun(t, args...)
			got := []byte(strings.ReplaceAll(out, dir, "$DIR"))
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestInspectGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("damacy %s differs from %s (-want +got):\n%s", strings.Join(args, " "), golden, cmp.Diff(string(want), string(got)))
				os.WriteFile(golden+".out", got, 0o644)
			}
		}
	}
}

// TestInspectCounts checks inspect's storage figures against what the
// test stores hold, independently of the golden files.
func TestInspectCounts(t *testing.T) {
	dir := t.TempDir()
	makeStores(t, dir)
	out, _ := mustRun(t, "inspect", "--json", filepath.Join(dir, "plain.zarr"))
	var r inspectResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	// 4 x 4 chunks of 8 x 16, of which rows 0-1 x columns 1-2 were written.
	st := r.Array.Storage
	if st.ObjectsTotal != 16 || st.Objects != 4 || st.Chunks != 4 || st.DecodedBytes != 4*8*16*4 {
		t.Errorf("plain.zarr storage = %+v; want 4 of 16 objects, 4 chunks of 512 bytes", st)
	}
	if r.Array.FillValue != "NaN" || r.Array.Endian != "big" || r.Array.ShardShape != nil {
		t.Errorf("plain.zarr: fill %q, endian %q, shard %v; want NaN, big, none", r.Array.FillValue, r.Array.Endian, r.Array.ShardShape)
	}
	out, _ = mustRun(t, "inspect", "--json", filepath.Join(dir, "image.ome.zarr"))
	r = inspectResult{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.NGFF == nil || len(r.NGFF.Levels) != 2 {
		t.Fatalf("image.ome.zarr: %s", out)
	}
	l0 := r.NGFF.Levels[0].Array.Storage
	// 20x40x36 in shards of 16x32x32: 2x2x2 shards; chunks 8x16x16: 3x3x3
	// stored (edge chunks are whole chunks), in a grid of 4x4x4.
	if l0.ObjectsTotal != 8 || l0.Objects != 8 || l0.ChunksTotal != 64 || l0.Chunks != 27 {
		t.Errorf("level 0 storage = %+v; want 8 of 8 shards, 27 of 64 chunks", l0)
	}
	var disk int64
	filepath.Walk(filepath.Join(dir, "image.ome.zarr", "0", "c"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			disk += fi.Size()
		}
		return nil
	})
	if l0.DiskBytes != disk {
		t.Errorf("level 0 disk bytes = %d; the shard files hold %d", l0.DiskBytes, disk)
	}
	if got := r.NGFF.Levels[1].Scale; !cmp.Equal(got, []float64{4, 1, 1}) {
		t.Errorf("level 1 scale = %v; want [4 1 1]", got)
	}
}

// jsonUnmarshalStrict decodes b into v, refusing unknown fields.
func jsonUnmarshalStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
