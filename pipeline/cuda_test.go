package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// runBoth streams the same samples through the host engine and through a
// CUDA engine and requires bit-identical batches. withNVCOMP asks for
// nvCOMP: on the GPU host (DAMACY_REQUIRE_GPU=1) the test fails if it does
// not load, elsewhere the CUDA engine then decodes on the CPU.
func runBoth(t *testing.T, cfg Config, samples []Sample, withNVCOMP bool) Stats {
	t.Helper()
	return runBothOn(t, cfg, samples, samples, withNVCOMP)
}

// runBothOn is runBoth with the CUDA engine reading gpuSamples: the same
// boxes as samples at other URIs (a copy on a server).
func runBothOn(t *testing.T, cfg Config, samples, gpuSamples []Sample, withNVCOMP bool) Stats {
	t.Helper()
	if withNVCOMP {
		_, err := nvcomp.Load()
		cudatest.RequireNVCOMP(t, err)
	}
	hcfg := cfg
	hcfg.Device = "cpu"
	hcfg, err := hcfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	hs := new(statsSink)
	he, err := newHostEngine(hcfg, hs)
	if err != nil {
		t.Fatal(err)
	}
	host, err := start(hcfg, he, hs)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	gcfg := cfg
	gcfg.Device = "cuda"
	gcfg, err = gcfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	gs := new(statsSink)
	ge, err := newCUDAEngine(gcfg, 0, gs, withNVCOMP)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := start(gcfg, ge, gs)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	pushAll(t, host, samples...)
	pushAll(t, gpu, gpuSamples...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for got := 0; got < len(samples); {
		hb, err := host.Pop(ctx)
		if err != nil {
			t.Fatalf("host Pop: %v", err)
		}
		gb, err := gpu.Pop(ctx)
		if err != nil {
			t.Fatalf("cuda Pop: %v", err)
		}
		want := hb.Bytes()
		have := make([]byte, len(want))
		for i := range have {
			have[i] = 0xA5 // poison: every byte must be written
		}
		if err := gb.CopyToHost(have); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			per := len(want) / hb.Len()
			for i := range hb.Len() {
				if !bytes.Equal(have[i*per:(i+1)*per], want[i*per:(i+1)*per]) {
					t.Fatalf("batch %d sample %s: cuda engine differs from host engine: %s", gb.Info().ID, hb.Samples()[i], firstDiff(have[i*per:(i+1)*per], want[i*per:(i+1)*per], cfg.Dtype.Size()))
				}
			}
		}
		got += hb.Len()
		hb.Release()
		gb.Release()
	}
	return gpu.Stats()
}

// TestCUDAEngineMatchesHost compares the CUDA engine with the host engine
// bit for bit, for every codec, dtype and output dtype, with and without
// nvCOMP.
func TestCUDAEngineMatchesHost(t *testing.T) {
	cudatest.MustHaveGPU(t)
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	var paths []string
	for ci, codec := range e2eCodecs {
		for di, dt := range e2eDtypes {
			sc := storeCase{name: fmt.Sprintf("%s-%s", codec.name, dt), spec: writer.Spec{Shape: []int64{37, 29, 20},
				ChunkShape: []int64{8, 8, 8}, DataType: dt, Compression: codec.c, SkipEmptyChunks: true}}
			switch (ci + di) % 5 {
			case 0:
				sc.spec.ShardShape = []int64{16, 16, 8}
			case 1:
				sc.spec.ShardShape, sc.spec.IndexAtStart = []int64{8, 16, 16}, true
			case 2:
				sc.spec.BigEndian = dt.Size() > 1
			case 3:
				sc.spec.Order = 'F'
			case 4:
				if !(codec.c.Codec == writer.Zstd && codec.c.Checksum) {
					sc.spec.Format = 2
				}
			}
			paths = append(paths, writeCase(t, dir, sc, seed+uint64(ci*100+di)))
		}
	}
	var samples []Sample
	for i := range 600 {
		path := paths[i%len(paths)]
		a, err := zarr.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, Sample{URI: path, Box: randomBox(rng, a.Shape(), []int{9, 11, 6})})
	}
	for _, nv := range []bool{true, false} {
		for _, out := range []Dtype{F32, BF16} {
			t.Run(fmt.Sprintf("nvcomp=%v/%s", nv, out), func(t *testing.T) {
				// Three slots: a batch's last wave can take the next
				// batch's first chunks while Pop's caller holds one.
				cfg := Config{BatchSize: 16, SampleShape: []int{9, 11, 6}, Dtype: out, HostBufferBytes: 16 << 20,
					DeviceBufferBytes: 4 << 20, MaxChunkBytes: 1 << 20, BatchSlots: 3}
				st := runBoth(t, cfg, samples, nv)
				t.Logf("%s: %d waves (%d shared by batches), %d chunks decoded (%d by nvCOMP), %d fills", st.Decoder, st.WavesEmitted, st.WavesShared, st.ChunksDecoded, st.ChunksGPU, st.ChunksFill)
				if nv && st.ChunksGPU == 0 && st.Decoder != "cpu" {
					t.Errorf("nvCOMP is loaded but decoded no chunk")
				}
				if st.WavesShared == 0 {
					t.Errorf("no wave carried chunks of two batches")
				}
			})
		}
	}
}

// TestCUDAEngineLarge runs bigger boxes over a sharded zstd uint16 dataset,
// the shape of damacy's benchmark, small enough for a test, and reports the
// stage times.
func TestCUDAEngineLarge(t *testing.T) {
	cudatest.MustHaveGPU(t)
	dir := t.TempDir()
	var paths []string
	for i := range 2 {
		sc := storeCase{name: fmt.Sprint("big", i), spec: writer.Spec{Shape: []int64{128, 256, 256}, ChunkShape: []int64{32, 64, 64},
			ShardShape: []int64{64, 256, 256}, DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3}}}
		paths = append(paths, writeCase(t, dir, sc, uint64(i)))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var samples []Sample
	for i := range 64 {
		a, _ := zarr.Open(paths[i%2])
		samples = append(samples, Sample{URI: paths[i%2], Box: randomBox(rng, a.Shape(), []int{64, 96, 96})})
	}
	cfg := Config{BatchSize: 8, SampleShape: []int{64, 96, 96}, HostBufferBytes: 256 << 20, DeviceBufferBytes: 128 << 20}
	st := runBoth(t, cfg, samples, true)
	t.Logf("%s: waves %d, chunks %d (gpu %d); h2d %v decode %v assemble %v", st.Decoder, st.WavesEmitted, st.ChunksDecoded, st.ChunksGPU, st.H2D.Time, st.Decompress.Time, st.Assemble.Time)
}
