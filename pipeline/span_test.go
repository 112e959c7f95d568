package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// Batches that share a wave fail alone. Between good batches, batches of
// an array whose LZ4 chunks no decoder takes (the GPU check refuses them,
// the CPU fails on them again: redo) and of an array whose zstd chunks
// fail their checksum (the checks before the GPU) each fail with ErrDecode
// naming their array; the good ones, in the same waves, come out right,
// and the pipeline keeps going.
func TestCUDASharedWaveErrors(t *testing.T) {
	cudatest.MustHaveGPU(t)
	_, err := nvcomp.Load()
	cudatest.RequireNVCOMP(t, err)
	seed := zarrtest.Seed(t)
	dir := t.TempDir()
	spec := func(c writer.Compression) writer.Spec {
		return writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8}, DataType: zarr.Uint16, Compression: c}
	}
	good := writeCase(t, dir, storeCase{name: "good", spec: spec(writer.Compression{Codec: writer.Zstd, Level: 1})}, seed)
	crc := writeCase(t, dir, storeCase{name: "crc", spec: spec(writer.Compression{Codec: writer.Zstd, Level: 1, Checksum: true})}, seed+1)
	rewriteChunks(t, crc, func(b []byte) []byte { b[len(b)/2] ^= 0x5A; return b })
	lz4, _ := lz4RedoStore(t)
	rewriteChunks(t, lz4, func(b []byte) []byte { return b[:len(b)-20] })

	ga, err := zarr.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	const per = 2
	var order []string // each batch's array
	var samples []Sample
	for i := range 48 {
		path := good
		if k := rng.IntN(4); i > 0 && k == 0 {
			path = crc
		} else if i > 0 && k == 1 {
			path = lz4
		}
		order = append(order, path)
		for range per {
			y, x := int64(rng.IntN(20)), int64(rng.IntN(20))
			samples = append(samples, Sample{URI: path, Box: []Range{{Start: y, Stop: y + 12}, {Start: x, Stop: x + 12}}})
		}
	}
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			// Holding the batch before while popping the next, with
			// two slots, leaves none free for a batch that joins a
			// wave: it is assembled late, once the batch before
			// is popped and the one before that given back.
			cfg := Config{BatchSize: per, SampleShape: []int{12, 12}, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20,
				MaxChunkBytes: 1 << 20, BatchSlots: 3, Device: "cuda"}
			if hold {
				cfg.BatchSlots = 2
			}
			p := newChecked(t, cfg)
			pushAll(t, p, samples...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var held *Batch
			for i, path := range order {
				b, err := p.Pop(ctx)
				if path != good {
					var pe *Error
					if !errors.Is(err, ErrDecode) || !errors.As(err, &pe) || pe.URI != path {
						t.Fatalf("batch %d of %s: %v; want ErrDecode naming it", i, path, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("batch %d of the good array: %v", i, err)
				}
				have := make([]byte, b.Len()*12*12*4)
				if err := b.CopyToHost(have); err != nil {
					t.Fatal(err)
				}
				n := len(have) / b.Len()
				for k, s := range b.Samples() {
					reg, err := ga.ReadRegion(s.Box)
					if err != nil {
						t.Fatal(err)
					}
					if want := expected(reg, F32); string(have[k*n:(k+1)*n]) != string(want) {
						t.Fatalf("batch %d sample %s: %s", i, s, firstDiff(have[k*n:(k+1)*n], want, 4))
					}
				}
				if held != nil {
					held.Release()
				}
				held = b
				if !hold {
					b.Release()
					held = nil
				}
			}
			if held != nil {
				held.Release()
			}
			st := p.Stats()
			late := p.eng.(*cudaEngine).lateParts.Load()
			t.Logf("%d waves, %d shared by batches, %d batches assembled late; %d chunks decoded again on the CPU", st.WavesEmitted, st.WavesShared, late, st.ChunksRedecoded)
			if st.WavesShared == 0 {
				t.Error("no wave carried chunks of two batches")
			}
			if hold && late == 0 {
				t.Error("no batch was assembled late, with every slot but one held")
			}
		})
	}
}

// Close while a batch that joined a wave waits for its slot (Pop's caller
// holds one of two): Close returns, and once the held batch is released
// every slot is back and no goroutine of the pipeline is left (the last
// slot frees the executor).
func TestCUDALateClose(t *testing.T) {
	cudatest.MustHaveGPU(t)
	seed := zarrtest.Seed(t)
	path := writeCase(t, t.TempDir(), storeCase{name: "a", spec: writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}}, seed)
	rng := rand.New(rand.NewPCG(seed, 4))
	var samples []Sample
	for range 80 {
		y, x := int64(rng.IntN(20)), int64(rng.IntN(20))
		samples = append(samples, Sample{URI: path, Box: []Range{{Start: y, Stop: y + 12}, {Start: x, Stop: x + 12}}})
	}
	cfg := Config{BatchSize: 2, SampleShape: []int{12, 12}, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20,
		MaxChunkBytes: 1 << 20, BatchSlots: 2, Device: "cuda"}
	// Whether a batch joins a wave while the other slot is free depends on
	// how far the planner had got when the batches were queued: a few
	// tries, each a new pipeline, until one has a batch waiting.
	for try := 1; ; try++ {
		before := runtime.NumGoroutine()
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pushAll(t, p, samples...)
		b, err := p.Pop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for p.eng.(*cudaEngine).lateParts.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		late := p.eng.(*cudaEngine).lateParts.Load() > 0
		if !late && try < 5 {
			b.Release()
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			checkGoroutines(t, before)
			continue
		}
		if !late {
			t.Fatalf("no batch waits to be assembled late while one of two slots is held, in %d tries", try)
		}
		t.Logf("a batch waits to be assembled late (try %d)", try)
		done := make(chan error, 1)
		go func() { done <- p.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Close hangs with a batch waiting for a slot")
		}
		b.Release()
		checkGoroutines(t, before)
		return
	}
}
