package bench

import (
	"context"
	"io"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr/writer"
)

func TestSpecFieldError(t *testing.T) {
	for _, tt := range []struct{ field, want string }{
		{"Spec.ShardShape", "dataset.shard: too big"},
		{"NGFFSpec.Array.ShardShape", "dataset.shard: too big"},
		{"Spec.ChunkShape", "dataset.chunk: too big"},
		{"Spec.Compression.Level", "dataset.level: too big"},
		{"Spec.Compression.Shuffle", "dataset.shuffle: too big"},
		{"Spec.Compression.BloscCompressor", "dataset.codec: too big"},
		{"NGFFSpec.Axes", "dataset: writer: NGFFSpec.Axes: too big"},
	} {
		err := specFieldError(&writer.SpecError{Field: tt.field, Reason: "too big"})
		if got := err.Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("specFieldError(%s) = %q; want it to start %q", tt.field, got, tt.want)
		}
	}
}

// TestGenerateFreesMemory: once ensureDataset has generated a dataset, the
// generator's buffers and encoders are no longer live and their memory is
// back with the system, so a --duration run that follows measures the
// pipeline's resident memory, not the generator's.
func TestGenerateFreesMemory(t *testing.T) {
	d := DatasetSpec{Arrays: 4, Shape: []int64{128, 128, 256}, Chunk: []int64{32, 64, 64}, Shard: []int64{64, 128, 256},
		Dtype: NameList{"uint16"}, Codec: NameList{"zstd"}, Level: 3, Entropy: 0.5, Seed: 1}
	if _, err := ensureDataset(context.Background(), Env{Stderr: io.Discard}, &d, t.TempDir(), false); err != nil {
		t.Fatal(err)
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	// A zstd encoder alone holds several MiB; two workers' pools left
	// about 40 MiB behind.
	if live, free := s[0].Value.Uint64(), s[1].Value.Uint64(); live > 16<<20 || free > 16<<20 {
		t.Errorf("after generating: %d MiB of live heap objects and %d MiB of free heap not returned to the system; want both under 16 MiB", live>>20, free>>20)
	}
}
