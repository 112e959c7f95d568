package bench

import (
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
