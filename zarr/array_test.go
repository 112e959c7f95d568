package zarr

import (
	"encoding/json"
	"slices"
	"testing"
	"testing/fstest"
)

func TestArrayAccessors(t *testing.T) {
	fsys := fstest.MapFS{}
	a := tarray{shape: []int64{30, 41}, chunk: []int64{16, 20}, dt: Float16, fill: `"-Infinity"`,
		keys:  `{"name":"default","configuration":{"separator":"."}}`,
		attrs: `{"units":"K"}`,
		chain: &tchain{shard: &tshard{chunk: []int64{8, 10}, inner: &tchain{shard: &tshard{chunk: []int64{4, 5},
			inner: &tchain{endian: BigEndian, bb: []tcodec{zstdCodecT(false, false, false)}}}}}}}
	a.write(t, fsys, "g/a", make([]byte, 30*41*2))
	fsys["g/a/zarr.json"].Data = []byte(string(fsys["g/a/zarr.json"].Data[:len(fsys["g/a/zarr.json"].Data)-1]) + `,"dimension_names":["y",null]}`)
	arr := openMap(t, fsys, "/g/a/")
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"Path", arr.Path(), "g/a"},
		{"MetadataKey", arr.MetadataKey(), "g/a/zarr.json"},
		{"ZarrFormat", arr.ZarrFormat(), 3},
		{"Rank", arr.Rank(), 2},
		{"DataType", arr.DataType(), Float16},
		{"Shape", arr.Shape(), []int64{30, 41}},
		{"ShardShape", arr.ShardShape(), []int64{16, 20}},
		{"ChunkShape", arr.ChunkShape(), []int64{4, 5}},
		{"GridShape", arr.GridShape(), []int64{2, 3}},
		{"FillValue", arr.FillValue(), []byte{0x00, 0xfc}},
		{"DimensionNames", arr.DimensionNames(), []string{"y", ""}},
		{"ChunkKey", arr.ChunkKey([]int64{1, 2}), "g/a/c.1.2"},
		{"Codec", arr.Codec().String(), "sharding_indexed"},
		{"Inner", arr.Codec().Sharding().Inner().Sharding().Inner().String(), "bytes -> zstd"},
		{"Names", arr.Codec().Sharding().Inner().Sharding().Inner().Names(), []string{"bytes", "zstd"}},
		{"Leaf", arr.Codec().Leaf(), false},
		{"GridShape inner", arr.Codec().Sharding().GridShape(), []int64{2, 2}},
		{"ChunkShape inner", arr.Codec().Sharding().ChunkShape(), []int64{8, 10}},
		{"IndexAtStart", arr.Codec().Sharding().IndexAtStart(), false},
	} {
		g, _ := json.Marshal(tt.got)
		w, _ := json.Marshal(tt.want)
		if string(g) != string(w) {
			t.Errorf("%s() = %s, want %s", tt.name, g, w)
		}
	}
	var attrs map[string]string
	if err := json.Unmarshal(arr.Attributes(), &attrs); err != nil || attrs["units"] != "K" {
		t.Errorf("Attributes() = %s, %v", arr.Attributes(), err)
	}
	l := arr.Codec().Sharding().Inner().Sharding().Inner().Layout()
	if !slices.Equal(l.Strides, []int64{5, 1}) || l.Endian != BigEndian || l.Bytes() != 40 {
		t.Errorf("inner Layout() = %+v", l)
	}
	// Accessors return copies.
	arr.Shape()[0] = 99
	arr.FillValue()[0] = 99
	if arr.Shape()[0] != 30 || arr.FillValue()[0] != 0 {
		t.Error("accessors expose the array's own slices")
	}
}

// TestTransposeLayout checks the strides a transpose chain reports: the
// decoded buffer is C order over the permuted shape.
func TestTransposeLayout(t *testing.T) {
	doc := v3Doc(t, map[string]string{"shape": `[4, 5, 6]`,
		"chunk_grid": `{"name":"regular","configuration":{"chunk_shape":[4,5,6]}}`,
		"codecs":     `[{"name":"transpose","configuration":{"order":[2,0,1]}},{"name":"transpose","configuration":{"order":[1,0,2]}},{"name":"bytes","configuration":{"endian":"big"}}]`})
	info, err := mustParseV3(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	// Encoded axes: first [2,0,1] (shape 6,4,5), then swap the first two:
	// axes [0,2,1], shape (4,6,5): C strides 30, 5, 1 for logical axes 0,
	// 2, 1.
	l := info.codec.Layout()
	if !slices.Equal(l.Strides, []int64{30, 1, 5}) || l.Endian != BigEndian {
		t.Errorf("Layout() = %+v, want strides [30 1 5], big endian", l)
	}
	if r := info.codec.Route(); !r.Simple || r.Compression != CompressionNone {
		t.Errorf("Route() = %+v", r)
	}
}
