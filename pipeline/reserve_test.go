package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// TestSampleShapeFromLatePush leaves Config.SampleShape empty, as the seed's
// Python API does, and pushes the first sample only after the engine's
// goroutines have started: the engines must not read what reserve sets up
// (the assemble layout, the slot pool) before the first batch reaches
// them. Meanwhile a goroutine polls Stats, which reads the slot pool that
// the first Push creates. Run it under -race.
func TestSampleShapeFromLatePush(t *testing.T) {
	path := writeCase(t, t.TempDir(), storeCase{name: "late", spec: writer.Spec{Shape: []int64{40, 40}, ChunkShape: []int64{8, 8},
		ShardShape: []int64{16, 16}, DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd}}}, 1)
	a, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ext := []int{12, 9}
	for _, dev := range []string{"cpu", "cuda"} {
		t.Run(dev, func(t *testing.T) {
			if dev == "cuda" {
				cudatest.MustHaveGPU(t)
			}
			cfg := Config{BatchSize: 3, Device: dev, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 1 << 20,
				ComputeThreads: 2, IOThreads: 2}
			p := newChecked(t, cfg)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					p.Stats()
					time.Sleep(time.Millisecond)
				}
			})
			time.Sleep(50 * time.Millisecond) // the engine's goroutines are running
			rng := newTestRand(t)
			var samples []Sample
			for range 7 {
				samples = append(samples, Sample{URI: path, Box: randomBox(rng, a.Shape(), ext)})
			}
			pushAll(t, p, samples...)
			comparePopped(t, p, samples, F32)
			close(stop)
			wg.Wait()
		})
	}
}

// comparePopped pops batches until every sample is delivered and compares
// each with the reference reader.
func comparePopped(t *testing.T, p *Pipeline, samples []Sample, out Dtype) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	arrays := map[string]*zarr.Array{}
	for got := 0; got < len(samples); {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("Pop after %d samples: %v", got, err)
		}
		have := make([]byte, b.tensors[0].slot.bytes(b.Len()))
		if err := b.CopyToHost(have); err != nil {
			t.Fatal(err)
		}
		per := len(have) / b.Len()
		for i, s := range b.Samples() {
			a := arrays[s.URI]
			if a == nil {
				if a, err = zarr.Open(s.URI); err != nil {
					t.Fatal(err)
				}
				arrays[s.URI] = a
			}
			reg, err := a.ReadRegion(s.Box)
			if err != nil {
				t.Fatal(err)
			}
			if want := expected(reg, out); string(want) != string(have[i*per:(i+1)*per]) {
				t.Fatalf("sample %s (%s out): %s", s, out, firstDiff(have[i*per:(i+1)*per], want, out.Size()))
			}
		}
		got += b.Len()
		b.Release()
	}
}
