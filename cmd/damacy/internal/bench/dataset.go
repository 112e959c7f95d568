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
	images := plural(s.Images, "image")
	if d.Labels != nil {
		images += fmt.Sprintf(" with label images %q", d.Labels.Name)
	}
	fmt.Fprintf(e.Stderr, "damacy: wrote %s to %s: %s raw, %s on disk (ratio %.2f) in %s (%s/s)\n",
		images, dir, base.FormatBytes(s.RawBytes), base.FormatBytes(s.DiskBytes), ratio,
		s.Elapsed.Round(time.Millisecond), base.FormatBytes(int64(float64(s.RawBytes)/max(s.Elapsed.Seconds(), 1e-9))))
	return s, nil
}

// genJob is one shard (or unsharded chunk) to generate and write: of an
// image (synth, brightened inside the blobs when it has labels) or of a
// label image (the blobs painted).
type genJob struct {
	arr   *writer.Array
	fill  func(dst []byte, box []zarr.Range) error // the image's values; nil for a label block
	blobs *blobs                                   // the image's blobs; nil without labels
	dt    zarr.DataType
	box   []zarr.Range
	bytes int
	space int // voxels of the box's space axes (its mask's size)
}

// run generates the job's block into buf, its blobs' mask into mask, and
// writes the block.
func (j *genJob) run(buf, mask []byte) error {
	dst := buf[:j.bytes]
	if j.blobs != nil {
		mask = mask[:j.space]
		j.blobs.paint(mask, j.box[len(j.box)-min(len(j.box), 3):])
	}
	if j.fill == nil {
		putLabels(dst, j.dt, mask)
		return j.arr.WriteRegion(j.box, dst)
	}
	if err := j.fill(dst, j.box); err != nil {
		return err
	}
	if j.blobs != nil {
		brighten(dst, j.dt, mask)
	}
	return j.arr.WriteRegion(j.box, dst)
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
	var labels []*writer.Multiscale
	var raw int64
	maxBlock, maxMask := 0, 0
	add := func(j genJob, a *writer.Array) {
		size := j.dt.Size()
		for _, box := range a.Blocks() {
			j.box, j.bytes, j.space = box, size, 1
			for k, r := range box {
				j.bytes *= int(r.Len())
				if k >= len(box)-min(len(box), 3) {
					j.space *= int(r.Len())
				}
			}
			jobs = append(jobs, j)
			raw += int64(j.bytes)
			maxBlock = max(maxBlock, j.bytes)
			if j.blobs != nil {
				maxMask = max(maxMask, j.space)
			}
		}
	}
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
		seed := d.Seed + uint64(i)*0x9E3779B97F4A7C15
		fill := (&writer.Synth{
			Seed:           seed,
			DataType:       spec.Array.DataType,
			Shape:          spec.Array.Shape,
			RandomFraction: d.Entropy,
		}).Fill
		if d.Values == ValuesZarrBenchmarks {
			fill = writer.BenchmarkFill
		}
		var bl *blobs
		if d.Labels != nil {
			bl = newBlobs(d.labelShape(), d.Labels.Foreground, seed)
			lspec, err := d.labelSpec()
			if err != nil {
				return nil, err
			}
			lm, err := writer.CreateNGFF(labelDir(filepath.Join(dir, ArrayName(i)), d.Labels.Name), lspec)
			if err != nil {
				return nil, fieldErr("dataset.labels", "%v", err)
			}
			labels = append(labels, lm)
			add(genJob{arr: lm.Level(0), blobs: bl, dt: lspec.Array.DataType}, lm.Level(0))
		}
		add(genJob{arr: m.Level(0), fill: fill, blobs: bl, dt: spec.Array.DataType}, m.Level(0))
	}
	workers := min(runtime.GOMAXPROCS(0), len(jobs), max(1, genMemoryBudget/max(maxBlock+maxMask, 1)))
	prog := startProgress(e, "generating", "B", raw)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf, mask := make([]byte, maxBlock), make([]byte, maxMask)
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= len(jobs) {
					return
				}
				j := &jobs[k]
				if err := j.run(buf, mask); err != nil {
					cancel(err)
					return
				}
				prog.add(int64(j.bytes))
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		prog.finish()
		return nil, context.Cause(ctx)
	}
	// The label images' coarser levels, and their OME-NGFF label metadata.
	for i, lm := range labels {
		if err := lm.Downsample(ctx, runtime.GOMAXPROCS(0)); err != nil {
			prog.finish()
			return nil, err
		}
		if err := markLabelImage(filepath.Join(dir, ArrayName(i)), d.Labels.Name); err != nil {
			prog.finish()
			return nil, err
		}
	}
	elapsed := prog.finish()
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
