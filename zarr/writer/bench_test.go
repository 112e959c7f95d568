package writer

import (
	"context"
	"testing"

	"github.com/damacy-go/damacy/zarr"
)

// benchSpec is damacy's benchmark geometry: uint16, inner chunks 32x64x64
// (256 KiB), shards 256x256x512 (256 chunks, 64 MiB), zstd level 3. The
// array is two shards, 128 MiB.
var benchSpec = Spec{
	Shape: []int64{512, 256, 512}, ChunkShape: []int64{32, 64, 64}, ShardShape: []int64{256, 256, 512},
	DataType: zarr.Uint16, Compression: Compression{Codec: Zstd, Level: 3},
}

// benchSynth is damacy's benchmark data, "entropy 0.5": half the voxels
// random, the rest 0.
var benchSynth = Synth{Seed: 1, DataType: zarr.Uint16, Shape: benchSpec.Shape, RandomFraction: 0.5}

// BenchmarkWriteShardedZstdUint16 measures WriteRegion of the whole array
// from memory: encoding and writing only. Bytes are those of the
// uncompressed array.
func BenchmarkWriteShardedZstdUint16(b *testing.B) {
	a, err := Create(b.TempDir(), benchSpec)
	if err != nil {
		b.Fatal(err)
	}
	box := fullBox(benchSpec.Shape)
	data := make([]byte, boxBytes(box, 2))
	if err := benchSynth.Fill(data, box); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := a.WriteRegion(box, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerateShardedZstdUint16 measures what `damacy gen` does:
// WriteFrom with Synth.Fill as the source.
func BenchmarkGenerateShardedZstdUint16(b *testing.B) {
	a, err := Create(b.TempDir(), benchSpec)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(product(benchSpec.Shape) * 2)
	for b.Loop() {
		if err := a.WriteFrom(context.Background(), 0, benchSynth.Fill); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSynth measures the generator alone on one goroutine, filling one
// 256 KiB chunk at a time.
func BenchmarkSynth(b *testing.B) {
	box := []zarr.Range{{Start: 32, Stop: 64}, {Start: 64, Stop: 128}, {Start: 0, Stop: 64}}
	buf := make([]byte, boxBytes(box, 2))
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := benchSynth.Fill(buf, box); err != nil {
			b.Fatal(err)
		}
	}
}
