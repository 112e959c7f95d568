package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/dlpack"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// requireGPUsEnv, set to a count, makes TestTwoGPUs fail instead of skip
// when the host has fewer GPUs.
const requireGPUsEnv = "DAMACY_REQUIRE_GPUS"

// TestTwoGPUs runs one pipeline per GPU on two GPUs at once, in one
// process: each keeps its batches on its own device (pointer attributes,
// Info and DLPack agree), both give the host engine's bytes, and neither
// waits for the other (the run of both together takes well under the sum
// of the two alone; logged, not asserted).
func TestTwoGPUs(t *testing.T) {
	cudatest.MustHaveGPU(t)
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		if want := os.Getenv(requireGPUsEnv); want != "" && want != "1" {
			t.Fatalf("%d GPU(s), and %s=%s", n, requireGPUsEnv, want)
		}
		t.Skipf("%d GPU(s): needs 2", n)
	}
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 15))
	var paths []string
	for i := range 4 {
		sc := storeCase{name: fmt.Sprint("multi", i), spec: writer.Spec{Shape: []int64{96, 128, 128}, ChunkShape: []int64{32, 32, 32},
			ShardShape: []int64{96, 64, 128}, DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3}}}
		paths = append(paths, writeCase(t, dir, sc, seed+uint64(i)))
	}
	ext := []int{48, 64, 64}
	var samples []Sample
	for i := range 256 {
		a, err := zarr.Open(paths[i%len(paths)])
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, Sample{URI: paths[i%len(paths)], Box: randomBox(rng, a.Shape(), ext)})
	}
	base := Config{BatchSize: 16, SampleShape: ext, HostBufferBytes: 64 << 20, DeviceBufferBytes: 64 << 20}
	want := collect(t, base, "cpu", samples, -1)

	alone := make([]time.Duration, 2)
	for dev := range 2 {
		start := time.Now()
		got := collect(t, base, fmt.Sprintf("cuda:%d", dev), samples, dev)
		alone[dev] = time.Since(start)
		compareBatches(t, fmt.Sprintf("cuda:%d alone", dev), got, want)
	}
	var wg sync.WaitGroup
	got := make([][][]byte, 2)
	start := time.Now()
	for dev := range 2 {
		wg.Go(func() { got[dev] = collect(t, base, fmt.Sprintf("cuda:%d", dev), samples, dev) })
	}
	wg.Wait()
	both := time.Since(start)
	for dev := range 2 {
		compareBatches(t, fmt.Sprintf("cuda:%d beside the other", dev), got[dev], want)
	}
	t.Logf("alone %v + %v, together %v (%.2fx of the sum)", alone[0], alone[1], both, float64(both)/float64(alone[0]+alone[1]))
}

// collect streams samples through a new pipeline on device and returns
// each batch's bytes; for a GPU (ordinal >= 0) it also checks that the
// batch memory, Info and the DLPack export all name that GPU.
func collect(t *testing.T, cfg Config, device string, samples []Sample, ordinal int) [][]byte {
	t.Helper()
	cfg.Device = device
	p, err := New(cfg)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer p.Close()
	if err := p.Push(samples...); err != nil {
		t.Error(err)
		return nil
	}
	if err := p.Flush(); err != nil {
		t.Error(err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out [][]byte
	for got := 0; got < len(samples); {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Errorf("%s: Pop: %v", device, err)
			return nil
		}
		info := b.Info()
		buf := make([]byte, b.tensors[0].slot.bytes(b.Len()))
		if ordinal >= 0 {
			if info.Device != device {
				t.Errorf("%s: Info().Device = %q", device, info.Device)
			}
			attr, err := cuda.DevicePtr(info.Ptr).Attributes()
			if err != nil || attr.Device != ordinal || attr.MemoryType != cuda.MemoryTypeDevice {
				t.Errorf("%s: batch memory attributes %+v, %v", device, attr, err)
			}
			m, err := b.DLPack(-1, dlpack.Versioned)
			if err != nil {
				t.Errorf("%s: DLPack: %v", device, err)
			} else {
				// The export is C memory this process wrote: read its device.
				mt := (*dlpack.ManagedTensorVersioned)(unsafe.Add(nil, m.Ptr()))
				if d := mt.DLTensor.Device; d.Type != dlpack.CUDA || int(d.ID) != ordinal {
					t.Errorf("%s: DLPack device %v", device, d)
				}
				m.Delete()
			}
			if err := b.CopyToHost(buf); err != nil {
				t.Errorf("%s: CopyToHost: %v", device, err)
			}
		} else {
			copy(buf, b.Bytes())
		}
		out = append(out, buf)
		got += b.Len()
		b.Release()
	}
	return out
}

func compareBatches(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d batches, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("%s: batch %d differs from the host engine: %s", what, i, firstDiff(got[i], want[i], 4))
		}
	}
}
