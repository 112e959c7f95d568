package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// tinySplit splits every chunk of the tests' arrays (16^3 elements of 2
// or 4 bytes) into tasks of a KiB: blosc blocks decoded one per task, and
// ops cut into ranges of 256 or 512 elements.
var tinySplit = cpuSplit{min: 2 << 10, part: 1 << 10}

// bigChunkCodecs are the codecs of the split tests: raw chunks (read in
// place), zstd (decoded whole, its assembly split), and blosc with every
// shuffle in blocks of 1 KiB (decoded by ranges of blocks).
var bigChunkCodecs = []struct {
	name string
	c    writer.Compression
}{
	{"raw", writer.Compression{}},
	{"zstd-crc", writer.Compression{Codec: writer.Zstd, Level: 1, Checksum: true}},
	{"blosc-noshuffle", writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.NoShuffle, Blocksize: 1024}},
	{"blosc-shuffle", writer.Compression{Codec: writer.Blosc, Level: 9, BloscCompressor: blosc.BloscLZ, Shuffle: blosc.ByteShuffle, Blocksize: 1024}},
	{"blosc-bitshuffle", writer.Compression{Codec: writer.Blosc, Level: 3, BloscCompressor: blosc.Zstd, Shuffle: blosc.BitShuffle, Blocksize: 1024}},
}

// writeBigChunkCases writes an array of each of bigChunkCodecs for dtype
// dt, varying the layout: sharded or not, big-endian.
func writeBigChunkCases(t *testing.T, dir string, dt zarr.DataType, seed uint64) []string {
	var paths []string
	for ci, codec := range bigChunkCodecs {
		sc := storeCase{name: fmt.Sprintf("%s-%s", codec.name, dt), spec: writer.Spec{Shape: []int64{40, 36, 30},
			ChunkShape: []int64{16, 16, 16}, DataType: dt, Compression: codec.c, SkipEmptyChunks: true}}
		switch ci % 3 {
		case 0:
			sc.spec.ShardShape = []int64{32, 32, 16}
		case 1:
			sc.spec.BigEndian = true
		}
		paths = append(paths, writeCase(t, dir, sc, seed+uint64(ci)))
	}
	return paths
}

// splitConfig is the host pipeline of the split tests; mapped reads
// files from their mappings (else into the slabs).
func splitConfig(out Dtype, mapped bool) Config {
	cfg := Config{BatchSize: 4, SampleShape: []int{20, 18, 12}, Dtype: out, Device: "cpu", HostBufferBytes: 1 << 20,
		DeviceBufferBytes: 1 << 20, ComputeThreads: 3, IOThreads: 2, MappedFileBytes: -1}
	if mapped {
		cfg.MappedFileBytes = 0
	}
	return cfg
}

// TestHostEngineBigChunks splits every chunk (tinySplit) and checks the
// batches against the reference reader, for every codec of
// bigChunkCodecs, read from mapped files and from the slabs, and that no
// slot or goroutine is left behind.
func TestHostEngineBigChunks(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	for _, dt := range []zarr.DataType{zarr.Uint16, zarr.Float32} {
		paths := writeBigChunkCases(t, dir, dt, seed)
		for _, mapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mapped=%v", dt, mapped), func(t *testing.T) {
				cfg := splitConfig(F32, mapped)
				p := newChecked(t, cfg)
				p.eng.(*hostEngine).split = tinySplit
				checkPipeline(t, p, cfg, paths, 48, seed)
			})
		}
	}
}

// TestHostEngineBigChunksMatchUnsplit compares, bit for bit, the batches
// of a host engine that splits every chunk with those of one that splits
// none, with transforms (flips, rotations, permutations and intensity)
// and integer outputs.
func TestHostEngineBigChunksMatchUnsplit(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	aug := &Augment{Seed: seed, Flip: []AxisChance{{0, 0.5}, {2, 0.5}}, Permute: []AxesChance{{Axes: []int{0, 1}, P: 0.5}},
		Scale: [2]float64{0.5, 2}, Offset: [2]float64{-3, 3}}
	for _, tc := range []struct {
		dt  zarr.DataType
		out Dtype
	}{{zarr.Uint16, I32}, {zarr.Uint16, BF16}, {zarr.Float32, F32}, {zarr.Uint8, U8}} {
		paths := writeBigChunkCases(t, dir, tc.dt, seed)
		t.Run(fmt.Sprintf("%s-%s", tc.dt, tc.out), func(t *testing.T) {
			cfg := splitConfig(tc.out, tc.dt == zarr.Uint16)
			cfg.SampleShape = []int{18, 18, 12}
			cfg.Augment = aug
			if tc.out.IsInteger() {
				a := *aug
				a.Scale, a.Offset = [2]float64{}, [2]float64{}
				cfg.Augment = &a
			}
			rng := rand.New(rand.NewPCG(seed, 9))
			var samples []Sample
			for i := range 32 {
				samples = append(samples, Sample{URI: paths[i%len(paths)], Box: randomBox(rng, []int64{40, 36, 30}, cfg.SampleShape)})
			}
			want := hostBatches(t, cfg, nil, samples)
			got := hostBatches(t, cfg, &tinySplit, samples)
			for i := range want {
				if string(got[i]) != string(want[i]) {
					t.Fatalf("batch %d: split %s", i, firstDiff(got[i], want[i], tc.out.Size()))
				}
			}
		})
	}
}

// hostBatches streams samples through a host pipeline of cfg (split: how
// it splits chunks; nil: its default) and returns its batches' bytes.
func hostBatches(t *testing.T, cfg Config, split *cpuSplit, samples []Sample) [][]byte {
	t.Helper()
	p := newChecked(t, cfg)
	if split != nil {
		p.eng.(*hostEngine).split = *split
	}
	done := make(chan error, 1)
	go func() {
		err := p.Push(samples...)
		if err == nil {
			err = p.Flush()
		}
		done <- err
	}()
	var out [][]byte
	for got := 0; got < len(samples); {
		b, err := p.Pop(context.Background())
		if err != nil {
			t.Fatalf("Pop after %d samples: %v", got, err)
		}
		out = append(out, append([]byte(nil), b.Bytes()...))
		got += b.Len()
		b.Release()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return out
}
