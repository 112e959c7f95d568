package remote_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/writer"
)

// TestShardIndexTail: through a remote store, the index at a shard's end
// is read with one suffix-range request that also gives the size, and
// parses to what the local file gives; a missing shard is (nil, nil), one
// shorter than its index a *zarr.FormatError.
func TestShardIndexTail(t *testing.T) {
	leakCheck(t)
	dir := t.TempDir()
	spec := writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8}, ShardShape: []int64{16, 16}, DataType: zarr.Uint16,
		Compression: writer.Compression{Codec: writer.Zstd}}
	a, err := writer.Create(filepath.Join(dir, "a"), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteFrom(context.Background(), 1, func(dst []byte, box []zarr.Range) error {
		for i := range dst {
			dst[i] = byte(i * 7)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Shard (1, 1) goes missing; shard (1, 0) is cut shorter than its index.
	if err := os.Remove(filepath.Join(dir, "a", "c", "1", "1")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "c", "1", "0"), []byte("short"), 0o666); err != nil {
		t.Fatal(err)
	}
	srv := remotetest.NewFaultServer(t, dir, false)
	st, path, o := openStore(t, fastOptions(), srv.URL+"/a")
	ra, err := zarr.OpenStore(st, path)
	if err != nil {
		t.Fatal(err)
	}
	la, err := zarr.Open(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	sh := ra.Codec().Sharding()
	for _, g := range [][]int64{{0, 0}, {0, 1}} {
		before := o.Stats().Requests
		got, err := zarr.ReadShardIndex(st, sh, zarr.Extent{Key: ra.ChunkKey(g), Length: -1})
		if err != nil {
			t.Fatal(err)
		}
		if n := o.Stats().Requests - before; n != 1 {
			t.Errorf("shard %v: %d requests, want 1", g, n)
		}
		want, err := zarr.ReadShardIndex(la.Store(), sh, zarr.Extent{Key: la.ChunkKey(g), Length: -1})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("shard %v: index %v, the local file's %v", g, got, want)
		}
	}
	if idx, err := zarr.ReadShardIndex(st, sh, zarr.Extent{Key: ra.ChunkKey([]int64{1, 1}), Length: -1}); idx != nil || err != nil {
		t.Errorf("missing shard: %v, %v; want nil, nil", idx, err)
	}
	var fe *zarr.FormatError
	if _, err := zarr.ReadShardIndex(st, sh, zarr.Extent{Key: ra.ChunkKey([]int64{1, 0}), Length: -1}); !errors.As(err, &fe) {
		t.Errorf("short shard: %v, want a *zarr.FormatError", err)
	}
}
