//go:build linux && (amd64 || arm64)

package pipeline

import (
	"runtime"
	"testing"
)

// TestHostBuffersOutsideHeap: the host engine's read slabs, arena and
// chunk cache (here 1.5 GiB in all) are not Go heap, so the garbage
// collector's pacing does not scale with them; closing unmaps them.
func TestHostBuffersOutsideHeap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := New(Config{SampleShape: []int{64, 64, 64}, Device: "cpu", HostBufferBytes: 512 << 20, DeviceBufferBytes: 512 << 20, ChunkCacheBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	h := p.eng.(*hostEngine)
	if got := int64(len(h.mem)); got < 3*(512<<20)/2 {
		t.Fatalf("the host region holds %d bytes; want the arena, the cache and the slabs", got)
	}
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 256<<20 {
		t.Errorf("the Go heap grew by %d bytes at New: the host buffers are in it", grew)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if h.mem != nil || h.arena != nil {
		t.Error("the host region was not unmapped at Close")
	}
}
