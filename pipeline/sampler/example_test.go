package sampler_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/damacy-go/damacy/pipeline/sampler"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// Example slides a 4 x 4 window over an 8 x 10 array, as inference does:
// the last window along an axis ends at the array's edge. A rank resumed
// from a saved State draws what the uninterrupted one would have.
func Example() {
	dir, err := os.MkdirTemp("", "damacy-sampler-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "image.zarr")
	// The sampler reads the array's metadata only.
	if _, err := writer.Create(path, writer.Spec{Shape: []int64{8, 10}, ChunkShape: []int64{4, 5}, DataType: zarr.Uint8}); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	s, err := sampler.New(ctx, sampler.Config{
		Kind:   sampler.Grid,
		Arrays: []sampler.Array{{URI: path}},
		Box:    []int64{4, 4},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("windows per epoch:", s.Len())
	for d := range s.Seq(sampler.State{}) {
		fmt.Println(d.Index, d.Window, d.Box)
	}
	// Resumed after 4 draws of epoch 0: the last 2.
	for _, d := range s.Draws(sampler.State{Epoch: 0, Next: 4}, 2) {
		fmt.Println("resumed:", d.Index, d.Box)
	}
	// Output:
	// windows per epoch: 6
	// 0 [0 0] [{0 4} {0 4}]
	// 1 [0 1] [{0 4} {4 8}]
	// 2 [0 2] [{0 4} {6 10}]
	// 3 [1 0] [{4 8} {0 4}]
	// 4 [1 1] [{4 8} {4 8}]
	// 5 [1 2] [{4 8} {6 10}]
	// resumed: 4 [{4 8} {4 8}]
	// resumed: 5 [{4 8} {6 10}]
}
