package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// markerFile records, in a dataset directory, the parameters the dataset
// was generated from. It is written last, so its presence means complete.
const markerFile = "damacy-dataset.json"

// marker is the content of markerFile for d.
func marker(d *DatasetSpec) []byte {
	c := *d
	c.Dir = ""
	b, _ := json.MarshalIndent(struct {
		Generator string      `json:"generator"`
		Dataset   DatasetSpec `json:"dataset"`
	}{"damacy gen", c}, "", "  ")
	return append(b, '\n')
}

// genSummary is what generating a dataset did.
type genSummary struct {
	Dir       string
	Images    int
	RawBytes  int64
	DiskBytes int64
	Elapsed   time.Duration
}

// EnsureDataset makes sure dir holds the dataset d, generating it when it
// is absent (as damacy gen does), and says on e.Stderr what it did.
func EnsureDataset(ctx context.Context, e Env, d *DatasetSpec, dir string) error {
	_, err := ensureDataset(ctx, e, d, dir, true)
	return err
}

// ensureDataset makes sure dir holds the dataset d, generating it when the
// marker is absent. verbose prints a summary line even when nothing had to
// be generated.
func ensureDataset(ctx context.Context, e Env, d *DatasetSpec, dir string, verbose bool) (*genSummary, error) {
	want := marker(d)
	got, err := os.ReadFile(filepath.Join(dir, markerFile))
	switch {
	case err == nil && bytes.Equal(got, want):
		if verbose {
			fmt.Fprintf(e.Stderr, "damacy: %s already holds this dataset; nothing to do\n", dir)
		}
		return &genSummary{Dir: dir, Images: d.Arrays}, nil
	case err == nil:
		return nil, fmt.Errorf("%s holds a different dataset (see its %s); remove it or choose another directory", dir, markerFile)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	s, err := generate(ctx, e, d, dir)
	// The generator's buffers go back to the system now, not over the
	// first minutes of a run whose resident memory is measured. It takes
	// two collections: the encoders the writer's sync.Pools held (about
	// 2 GB with 16 workers) survive the first in the pools' victim caches.
	runtime.GC()
	debug.FreeOSMemory()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), want, 0o644); err != nil {
		return nil, err
	}
	ratio := 0.0
	if s.DiskBytes > 0 {
		ratio = float64(s.RawBytes) / float64(s.DiskBytes)
	}
	fmt.Fprintf(e.Stderr, "damacy: wrote %s to %s: %s raw, %s on disk (ratio %.2f) in %s (%s/s)\n",
		plural(s.Images, "image"), dir, base.FormatBytes(s.RawBytes), base.FormatBytes(s.DiskBytes), ratio,
		s.Elapsed.Round(time.Millisecond), base.FormatBytes(int64(float64(s.RawBytes)/max(s.Elapsed.Seconds(), 1e-9))))
	return s, nil
}

// genJob is one shard (or unsharded chunk) to generate and write.
type genJob struct {
	arr   *writer.Array
	synth *writer.Synth
	box   []zarr.Range
	bytes int
}

// genMemoryBudget bounds the block buffers held by the generator's
// workers; at least one worker runs whatever a block's size.
const genMemoryBudget = 2 << 30

// generate writes every image of d into dir, shards of all images
// concurrently.
func generate(ctx context.Context, e Env, d *DatasetSpec, dir string) (*genSummary, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var jobs []genJob
	var raw int64
	maxBlock := 0
	for i := range d.Arrays {
		spec, err := d.arraySpec(i)
		if err != nil {
			return nil, err
		}
		m, err := writer.CreateNGFF(filepath.Join(dir, ArrayName(i)), spec)
		if err != nil {
			var se *writer.SpecError
			if errors.As(err, &se) {
				return nil, specFieldError(err)
			}
			return nil, err
		}
		a := m.Level(0)
		synth := &writer.Synth{
			Seed:           d.Seed + uint64(i)*0x9E3779B97F4A7C15,
			DataType:       spec.Array.DataType,
			Shape:          spec.Array.Shape,
			RandomFraction: d.Entropy,
		}
		size := spec.Array.DataType.Size()
		for _, box := range a.Blocks() {
			n := size
			for _, r := range box {
				n *= int(r.Len())
			}
			jobs = append(jobs, genJob{arr: a, synth: synth, box: box, bytes: n})
			raw += int64(n)
			maxBlock = max(maxBlock, n)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(jobs), max(1, genMemoryBudget/max(maxBlock, 1)))
	prog := startProgress(e, "generating", "B", raw)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, maxBlock)
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= len(jobs) {
					return
				}
				j := &jobs[k]
				dst := buf[:j.bytes]
				if err := j.synth.Fill(dst, j.box); err != nil {
					cancel(err)
					return
				}
				if err := j.arr.WriteRegion(j.box, dst); err != nil {
					cancel(err)
					return
				}
				prog.add(int64(j.bytes))
			}
		})
	}
	wg.Wait()
	elapsed := prog.finish()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	disk, err := diskBytes(dir)
	if err != nil {
		return nil, err
	}
	return &genSummary{Dir: dir, Images: d.Arrays, RawBytes: raw, DiskBytes: disk, Elapsed: elapsed}, nil
}

// diskBytes sums the sizes of the regular files under dir.
func diskBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.Type().IsRegular() {
			fi, err := de.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// plural writes n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
