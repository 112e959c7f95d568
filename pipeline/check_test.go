package pipeline

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	sc := storeCase{name: "a", spec: writer.Spec{Shape: []int64{16, 16}, ChunkShape: []int64{8, 8}, DataType: zarr.Uint8}}
	path := writeCase(t, dir, sc, 1)
	p, err := New(Config{Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	box := []Range{{Start: 0, Stop: 4}, {Start: 0, Stop: 4}}
	for _, tt := range []struct {
		s    Sample
		want error
	}{
		{Sample{URI: path, Box: box}, nil},
		{Sample{URI: filepath.Join(dir, "nope"), Box: box}, ErrNotFound},
		{Sample{URI: path, Box: box[:1]}, ErrRank},
		{Sample{URI: path, Box: box, Level: 1}, ErrInvalid},
		{Sample{URI: path, Box: box, Level: -1}, ErrInvalid},
		{Sample{Box: box}, ErrInvalid},
	} {
		err := p.Check(tt.s)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("Check(%s) = %v, want %v", tt.s, err, tt.want)
		}
	}
	if st := p.Stats(); st.ZarrMetaMisses == 0 {
		t.Errorf("Check did not go through the metadata cache: %+v", st)
	}
	p.Close()
	if err := p.Check(Sample{URI: path, Box: box}); !errors.Is(err, ErrShutdown) {
		t.Errorf("Check after Close = %v, want ErrShutdown", err)
	}
}
