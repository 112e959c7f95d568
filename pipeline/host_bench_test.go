package pipeline

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
)

// BenchmarkHostEngineOneChunk streams batches of one 256^3 uint16 chunk
// (32 MiB decoded, the zarr benchmark's values) into f32 on the host
// engine with every CPU: raw, and blosc blosclz level 9 with bit shuffle
// (the zarr benchmark's codec).
func BenchmarkHostEngineOneChunk(b *testing.B) {
	for _, tc := range []struct {
		name string
		c    writer.Compression
	}{
		{"raw", writer.Compression{}},
		{"blosc", writer.Compression{Codec: writer.Blosc, Level: 9, BloscCompressor: blosc.BloscLZ, Shuffle: blosc.BitShuffle}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const n = 256
			path := filepath.Join(b.TempDir(), tc.name)
			a, err := writer.Create(path, writer.Spec{Shape: []int64{n, n, n}, ChunkShape: []int64{n, n, n}, DataType: zarr.Uint16, Compression: tc.c})
			if err != nil {
				b.Fatal(err)
			}
			err = a.WriteFrom(context.Background(), 2, func(dst []byte, box []zarr.Range) error {
				i := 0
				for z := box[0].Start; z < box[0].Stop; z++ {
					for y := box[1].Start; y < box[1].Stop; y++ {
						for x := box[2].Start; x < box[2].Stop; x++ {
							binary.LittleEndian.PutUint16(dst[i:], uint16(x+y*y/32+z*z*z))
							i += 2
						}
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			p, err := New(Config{BatchSize: 1, SampleShape: []int{n, n, n}, Device: "cpu"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			s := Sample{URI: path, Box: []Range{{Start: 0, Stop: n}, {Start: 0, Stop: n}, {Start: 0, Stop: n}}}
			go func() {
				for range b.N {
					if p.Push(s) != nil {
						return
					}
				}
			}()
			b.SetBytes(2 * n * n * n)
			b.ResetTimer()
			for range b.N {
				batch, err := p.Pop(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				batch.Release()
			}
		})
	}
}
