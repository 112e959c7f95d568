package zarrtest

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"
)

func TestReadTestdataNPY(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata")
	var e *TestdataArray
	for _, a := range ReadTestdata(t, dir) {
		if a.Name == "zarr-python/v3-1d" {
			e = &a
		}
	}
	if e == nil {
		t.Fatal("no zarr-python/v3-1d in the manifest")
	}
	a, err := ReadNPY(filepath.Join(dir, e.NPY))
	if err != nil {
		t.Fatal(err)
	}
	if a.DType != "uint32" || !slices.Equal(a.Shape, []int64{37}) || len(a.Data) != 37*4 || !slices.Equal(e.Shape, a.Shape) {
		t.Fatalf("%s %v, %d bytes", a.DType, a.Shape, len(a.Data))
	}
	fill := []byte{1, 2, 3, 4}
	got := a.Box(fill, [][2]int64{{-2, 2}})
	want := append(bytes.Repeat(fill, 2), a.Data[:8]...)
	if !bytes.Equal(got, want) {
		t.Errorf("Box(-2:2) = %x, want %x", got, want)
	}
	if v := binary.LittleEndian.Uint32(a.Box(fill, [][2]int64{{36, 37}})); v != binary.LittleEndian.Uint32(a.Data[36*4:]) {
		t.Errorf("Box(36:37) = %d", v)
	}
	if n := len(TestdataBoxes([]int64{4, 5})); n != 5 {
		t.Errorf("%d boxes", n)
	}
}
