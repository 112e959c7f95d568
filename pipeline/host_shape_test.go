package pipeline

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// TestHostEngineShapeFromFirstSample leaves Config.SampleShape empty: the
// first pushed sample fixes it and reserves the slots while the engine is
// already running (the assemble plan must come from that reservation).
func TestHostEngineShapeFromFirstSample(t *testing.T) {
	dir := t.TempDir()
	sc := storeCase{name: "a", spec: writer.Spec{Shape: []int64{20, 24}, ChunkShape: []int64{8, 8}, DataType: zarr.Int16,
		Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}}
	path := writeCase(t, dir, sc, 4)
	cfg := Config{BatchSize: 2, Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2}
	// checkEngine takes the box extent from cfg.SampleShape; the pipeline
	// does not see it.
	shaped := cfg
	shaped.SampleShape = []int{5, 7}
	p := newChecked(t, cfg)
	time.Sleep(20 * time.Millisecond) // the engine's goroutines are up before the shape is known
	rng := rand.New(rand.NewPCG(1, 1))
	var samples []Sample
	for range 5 {
		samples = append(samples, Sample{URI: path, Box: randomBox(rng, sc.spec.Shape, shaped.SampleShape)})
	}
	if err := p.Push(samples...); err != nil {
		t.Fatal(err)
	}
	p.Flush()
	a, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for got := 0; got < len(samples); {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		per := len(b.Bytes()) / b.Len()
		for i, s := range b.Samples() {
			reg, err := a.ReadRegion(s.Box)
			if err != nil {
				t.Fatal(err)
			}
			if want := expected(reg, F32); string(b.Bytes()[i*per:(i+1)*per]) != string(want) {
				t.Fatalf("sample %s differs from the reference reader", s)
			}
		}
		got += b.Len()
		b.Release()
	}
}
