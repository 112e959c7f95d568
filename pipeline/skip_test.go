package pipeline

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// lockedBuffer is a bytes.Buffer for a logger used from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSkipOneSource: with one source, samples of missing arrays fail
// their batches at planning; OnErrorSkip leaves them out, also from a
// batch that holds nothing else (it comes out empty), keeps the good ones
// in order, and warns once per cause.
func TestSkipOneSource(t *testing.T) {
	dir := t.TempDir()
	sc := storeCase{name: "z", spec: writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8}, ShardShape: []int64{16, 16},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd}}}
	path := writeCase(t, dir, sc, 1)
	var log lockedBuffer
	p := newChecked(t, Config{BatchSize: 2, SampleShape: []int{8, 8}, Device: "cpu", OnError: OnErrorSkip,
		HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	good := func(y int64) Sample {
		return Sample{URI: path, Box: []Range{{Start: y, Stop: y + 8}, {Start: 0, Stop: 8}}}
	}
	nope := func(name string) Sample {
		return Sample{URI: filepath.Join(dir, name), Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}}
	}
	// Batches: [good, nope], [nope, nope], [other, good], [good].
	pushAll(t, p, good(0), nope("nope"), nope("nope"), nope("nope"), nope("other"), good(8), good(16))
	want := []struct {
		pos     []int64
		skipped []int64
	}{{[]int64{1}, []int64{2}}, {nil, []int64{3, 4}}, {[]int64{6}, []int64{5}}, {[]int64{7}, nil}}
	ctx := context.Background()
	for i, w := range want {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		var skipped []int64
		for _, e := range b.Skipped() {
			if !errors.Is(e, ErrNotFound) || !strings.Contains(e.Error(), e.URI) {
				t.Errorf("batch %d: skipped %v, want ErrNotFound naming its URI", i, e)
			}
			skipped = append(skipped, e.Position)
		}
		if !slices.Equal(b.Positions(), w.pos) || !slices.Equal(skipped, w.skipped) || b.Len() != len(w.pos) || b.Info().Shape[0] != int64(len(w.pos)) {
			t.Errorf("batch %d: samples %v, skipped %v, shape %v; want %v, %v", i, b.Positions(), skipped, b.Info().Shape, w.pos, w.skipped)
		}
		for k, s := range b.Samples() {
			reg := readRegion(t, path, s.Box)
			per := len(b.Bytes()) / max(b.Len(), 1)
			if string(b.Bytes()[k*per:(k+1)*per]) != string(expected(reg, F32)) {
				t.Errorf("batch %d: sample %s differs", i, s)
			}
		}
		b.Release()
	}
	st := p.Stats()
	if st.SamplesSkipped != 4 || st.SamplesEmitted != 3 || st.BatchesEmitted != 4 {
		t.Errorf("Stats: %d skipped, %d emitted in %d batches; want 4, 3, 4", st.SamplesSkipped, st.SamplesEmitted, st.BatchesEmitted)
	}
	if n := strings.Count(log.String(), "skipped a sample"); n != 2 {
		t.Errorf("%d warnings, want 2 (one per missing array):\n%s", n, log.String())
	}
}

// readRegion reads box of the array at path with the reference reader.
func readRegion(t *testing.T, path string, box []Range) *zarr.Region {
	t.Helper()
	a, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return regionOf(t, a, box)
}

// regionOf reads box of a with the reference reader.
func regionOf(t *testing.T, a *zarr.Array, box []Range) *zarr.Region {
	t.Helper()
	reg, err := a.ReadRegion(box)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestSkipPushSeq: under OnErrorSkip a sample a sequence gets wrong (a box
// of the wrong extent) is left out of its batch and the sequence goes on;
// under OnErrorRaise it ends the sequence and fails its batch.
func TestSkipPushSeq(t *testing.T) {
	dir := t.TempDir()
	sc := storeCase{name: "z", spec: writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8},
		DataType: zarr.Uint8, Compression: writer.Compression{Codec: writer.Zstd}}}
	path := writeCase(t, dir, sc, 2)
	seq := func(yield func(Sample) bool) {
		for i := range int64(4) {
			box := []Range{{Start: 8 * i, Stop: 8*i + 8}, {Start: 0, Stop: 8}}
			if i == 1 {
				box[1].Stop = 9
			}
			if !yield(Sample{URI: path, Box: box}) {
				return
			}
		}
	}
	for _, tc := range []struct {
		policy ErrorPolicy
		out    [][]int64 // positions of each batch's samples; nil: the batch fails
	}{
		{OnErrorRaise, [][]int64{nil}},
		{OnErrorSkip, [][]int64{{1}, {3, 4}}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			p := newChecked(t, Config{BatchSize: 2, SampleShape: []int{8, 8}, Device: "cpu", OnError: tc.policy,
				HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2})
			if err := p.PushSeq(seq); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.out {
				b, err := p.Pop(context.Background())
				if want == nil {
					if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "push (sequence)") {
						t.Fatalf("batch %d: %v, want the sequence's ErrInvalid", i, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if !slices.Equal(b.Positions(), want) {
					t.Errorf("batch %d: positions %v, want %v", i, b.Positions(), want)
				}
				if i == 0 && (len(b.Skipped()) != 1 || b.Skipped()[0].Position != 2 || !errors.Is(b.Skipped()[0], ErrInvalid)) {
					t.Errorf("batch 0 skipped %v, want sample 2's ErrInvalid", b.Skipped())
				}
				b.Release()
			}
		})
	}
}
