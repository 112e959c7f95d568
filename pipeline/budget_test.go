package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
)

// bigChunkArrays writes the public zarr benchmark's arrays in small: one
// 256^3 uint16 chunk of 32 MiB, stored raw, with blosc blosclz level 9
// and bit shuffle, and with zstd, its values as the benchmark's
// (writer.BenchmarkFill).
// With raw set, only the raw one.
func bigChunkArrays(t *testing.T, raw bool) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for _, c := range []struct {
		name string
		comp writer.Compression
	}{
		{"uncompressed", writer.Compression{}},
		{"blosclz", writer.Compression{Codec: writer.Blosc, BloscCompressor: blosc.BloscLZ, Level: 9, Shuffle: blosc.BitShuffle}},
		{"zstd", writer.Compression{Codec: writer.Zstd, Level: 1}},
	} {
		if raw && c.comp.Codec != writer.NoCompression {
			continue
		}
		paths = append(paths, writeBenchmarkArray(t, filepath.Join(dir, c.name), writer.Spec{Shape: []int64{256, 256, 256},
			ChunkShape: []int64{256, 256, 256}, DataType: zarr.Uint16, Compression: c.comp}))
	}
	return paths
}

// writeBenchmarkArray writes an array of spec at path holding the zarr
// benchmark's values (writer.BenchmarkFill), which compress, and returns
// path.
func writeBenchmarkArray(t *testing.T, path string, spec writer.Spec) string {
	t.Helper()
	a, err := writer.Create(path, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteFrom(context.Background(), 2, writer.BenchmarkFill); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDefaultConfigReadsBigChunks reads arrays of 32 MiB chunks with the
// default Config (the host engine): the chunks are sized as the arrays are
// opened, and every box matches the reference reader.
func TestDefaultConfigReadsBigChunks(t *testing.T) {
	paths := bigChunkArrays(t, false)
	checkEngine(t, Config{BatchSize: 3, SampleShape: []int{40, 24, 72}, Device: "cpu"}, paths, 3, 1)
}

// TestChunkBudgetErrors checks what a config that cannot hold a chunk
// says: the field at fault and what to raise it to, at New (MaxChunkBytes
// set) or at the batch that meets the chunk (MaxChunkBytes 0).
func TestChunkBudgetErrors(t *testing.T) {
	paths := bigChunkArrays(t, true)
	box := []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}, {Start: 0, Stop: 8}}
	for _, c := range []struct {
		name string
		cfg  Config
		want []string // in the error's text
	}{
		{"max chunk bytes", Config{MaxChunkBytes: 8 << 20},
			[]string{"decodes to 33554432 bytes, above Config.MaxChunkBytes = 8388608: raise it to at least 33554432"}},
		{"device buffer", Config{DeviceBufferBytes: 16 << 20},
			[]string{"a wave has 16777216 of Config.DeviceBufferBytes = 16777216: raise Config.DeviceBufferBytes to at least 34603008"}},
		{"host buffer", Config{HostBufferBytes: 48 << 20},
			[]string{"needs 33554432 staging bytes", "of Config.HostBufferBytes = 50331648: raise Config.HostBufferBytes to at least 100663296"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.SampleShape, cfg.Device, cfg.ComputeThreads, cfg.IOThreads = []int{8, 8, 8}, "cpu", 2, 2
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			pushAll(t, p, Sample{URI: paths[0], Box: box})
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			_, err = p.Pop(context.Background())
			if !errors.Is(err, ErrBudget) {
				t.Fatalf("Pop: %v, want ErrBudget", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Pop: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
	t.Run("at New", func(t *testing.T) {
		_, err := New(Config{Device: "cpu", MaxChunkBytes: 32 << 20, DeviceBufferBytes: 16 << 20})
		want := "Config.DeviceBufferBytes = 16777216 cannot hold one chunk of Config.MaxChunkBytes = 33554432: raise Config.DeviceBufferBytes to at least 33554432"
		if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), want) {
			t.Fatalf("New: %v\nwant ErrBudget saying %q", err, want)
		}
	})
	t.Run("raised as told", func(t *testing.T) {
		// What the errors above ask for is enough.
		cfg := Config{BatchSize: 1, SampleShape: []int{8, 8, 8}, Device: "cpu", HostBufferBytes: 96 << 20, DeviceBufferBytes: 33 << 20}
		checkEngine(t, cfg, paths, 1, 2)
	})
}

// TestCUDAEngineBigChunks reads arrays of 32 MiB chunks with the default
// Config on the CUDA engine, against the host engine, with and without
// nvCOMP: raw chunks are read in place, blosclz ones decoded on the GPU
// (with nvCOMP loaded; else on the CPU), and zstd ones, larger than an
// nvCOMP entry may be, on the CPU.
func TestCUDAEngineBigChunks(t *testing.T) {
	cudatest.MustHaveGPU(t)
	paths := bigChunkArrays(t, false)
	var samples []Sample
	rng := newTestRand(t)
	for i := range 8 {
		samples = append(samples, Sample{URI: paths[i%len(paths)], Box: randomBox(rng, []int64{256, 256, 256}, []int{96, 64, 128})})
	}
	for _, nv := range []bool{true, false} {
		st := runBoth(t, Config{BatchSize: 4, SampleShape: []int{96, 64, 128}}, samples, nv)
		t.Logf("nvcomp %v: %s: %d waves, %d chunks decoded (%d by nvCOMP)", nv, st.Decoder, st.WavesEmitted, st.ChunksDecoded, st.ChunksGPU)
	}
}
