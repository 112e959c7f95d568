package plan

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
)

// TestBatchDedupes: a chunk two samples of one array need is one job; the
// same key in another array is another.
func TestBatchDedupes(t *testing.T) {
	chunk := func(key string, off int64) zarr.Chunk { return zarr.Chunk{Key: key, Offset: off, Length: 10} }
	zp := func(chunks ...zarr.Chunk) *zarr.Plan {
		p := &zarr.Plan{Shape: []int64{2, 3}, DataType: zarr.Uint16, Chunks: chunks}
		p.Copies = append(p.Copies, zarr.Copy{Chunk: -1, Dst: []int64{0, 0}, Shape: []int64{1, 3}})
		for i := range chunks {
			p.Copies = append(p.Copies, zarr.Copy{Chunk: i, Src: []int64{int64(i), 0}, Dst: []int64{1, 0}, Shape: []int64{1, 3}})
		}
		return p
	}
	var b Batch[string]
	if first := b.Add(0, "a", zp(chunk("s/0", 0), chunk("s/0", 10))); first != 0 {
		t.Fatalf("first Add returned %d", first)
	}
	if first := b.Add(1, "a", zp(chunk("s/0", 10), chunk("s/1", 0))); first != 2 {
		t.Fatalf("second Add returned %d, want 2 (one new job)", first)
	}
	if first := b.Add(2, "b", zp(chunk("s/0", 0))); first != 3 {
		t.Fatalf("third Add returned %d, want 3", first)
	}
	wantJobs := []Job[string]{{"a", 0, chunk("s/0", 0)}, {"a", 0, chunk("s/0", 10)}, {"a", 1, chunk("s/1", 0)}, {"b", 2, chunk("s/0", 0)}}
	if diff := cmp.Diff(wantJobs, b.Jobs); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	var jobs []int
	for _, c := range b.Copies {
		jobs = append(jobs, c.Job)
	}
	if diff := cmp.Diff([]int{-1, 0, 1, -1, 1, 2, -1, 3}, jobs); diff != "" {
		t.Errorf("copies' jobs (-want +got):\n%s", diff)
	}
	if b.BoxBytes != 3*2*3*2 {
		t.Errorf("BoxBytes = %d, want %d", b.BoxBytes, 3*2*3*2)
	}
}

func TestAddOp(t *testing.T) {
	p, err := ptx.NewPlan(ptx.Layout{Samples: 2, Shape: []int{2, 3}, Dtype: ptx.Float32})
	if err != nil {
		t.Fatal(err)
	}
	dt, ok := Dtype(zarr.Uint16)
	if !ok {
		t.Fatal("no kernel type for uint16")
	}
	src := Source(dt, zarr.Layout{DataType: zarr.Uint16, Shape: []int64{4, 3}, Strides: []int64{3, 1}})
	fill := Copy{Sample: 1, Job: -1, Dst: []int64{0, 0}, Shape: []int64{1, 3}}
	copyOp := Copy{Sample: 1, Job: 0, Src: []int64{2, 0}, Dst: []int64{1, 0}, Shape: []int64{1, 3}}
	if n, err := AddOp(p, &fill, nil, FillBits(dt, []byte{7, 0})); n != 3 || err != nil {
		t.Fatalf("AddOp(fill) = %d, %v", n, err)
	}
	if n, err := AddOp(p, &copyOp, &src, 0); n != 3 || err != nil {
		t.Fatalf("AddOp(copy) = %d, %v", n, err)
	}
	if len(p.Ops()) != 2 {
		t.Fatalf("%d ops, want 2", len(p.Ops()))
	}
	if got := FillBits(dt, []byte{7, 0}); got != 0x40e00000 { // 7.0f
		t.Errorf("FillBits(uint16 7) = %#x, want 0x40e00000", got)
	}
}
