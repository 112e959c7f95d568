package pipeline_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// Example streams three 2 x 2 boxes out of a small sharded zarr array, in
// batches of two, on the host engine. The last box reaches past the
// array's edge, where it reads the fill value, and Flush makes its batch
// a short one.
func Example() {
	dir, err := os.MkdirTemp("", "damacy-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A 4 x 6 uint16 array whose element (y, x) is 10*y + x: one shard of
	// 2 x 3 chunks compressed with zstd.
	path := filepath.Join(dir, "image.zarr")
	arr, err := writer.Create(path, writer.Spec{
		Shape: []int64{4, 6}, ChunkShape: []int64{2, 3}, ShardShape: []int64{4, 6},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd},
	})
	if err != nil {
		log.Fatal(err)
	}
	data := make([]byte, 4*6*2)
	for i := range 4 * 6 {
		binary.LittleEndian.PutUint16(data[2*i:], uint16(10*(i/6)+i%6))
	}
	if err := arr.WriteRegion([]zarr.Range{{Start: 0, Stop: 4}, {Start: 0, Stop: 6}}, data); err != nil {
		log.Fatal(err)
	}

	p, err := pipeline.New(pipeline.Config{
		Device: "cpu", BatchSize: 2, SampleShape: []int{2, 2}, Dtype: pipeline.F32,
		HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, // small buffers for small chunks
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	for _, box := range [][]pipeline.Range{
		{{Start: 0, Stop: 2}, {Start: 0, Stop: 2}},
		{{Start: 1, Stop: 3}, {Start: 2, Stop: 4}},
		{{Start: 3, Stop: 5}, {Start: 5, Stop: 7}}, // past the edge: fill value 0
	} {
		if err := p.Push(pipeline.Sample{URI: path, Box: box}); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil { // no more samples: the last batch may be short
		log.Fatal(err)
	}
	for b, err := range p.Batches(context.Background(), 2) {
		if err != nil {
			log.Fatal(err)
		}
		info := b.Info()
		raw := b.Bytes() // host memory on the host engine
		values := make([]float32, len(raw)/4)
		for i := range values {
			values[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		fmt.Println(info.Shape, info.Dtype, info.Device, values)
		b.Release()
	}
	// Output:
	// [2 2 2] float32 cpu [0 1 10 11 12 13 22 23]
	// [1 2 2] float32 cpu [35 0 0 0]
}
