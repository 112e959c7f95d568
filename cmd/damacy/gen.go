package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/writer"
)

var cmdGen = &command{
	name:  "gen",
	usage: "gen [flags] SCENARIO.json DIR|s3://BUCKET/PATH",
	short: "write a scenario's synthetic dataset",
	long: `Gen writes the dataset of a scenario (a file, or a built-in name: see
'damacy help bench') into DIR: one OME-NGFF 0.5 image per array, named
a000, a001, ..., each over a sharded zarr v3 array. Shards are generated,
encoded and written concurrently, one per CPU, each worker holding one
shard's data, so memory stays bounded by a few shards per CPU.

The flags override the scenario's dataset fields. The same parameters and
seed give the same bytes. A file damacy-dataset.json, written last, records
the parameters: gen skips a DIR that already holds the same dataset, and
refuses one that holds a different one.

A status line is drawn on stderr when it is a terminal; a summary is always
printed.

DIR may also be an s3:// URI (credentials and endpoint as for reading:
see 'damacy help read'): the dataset is written to a temporary local
directory, then uploaded, one PUT per file; the local copy is removed.

Examples:
  damacy gen smoke /data/smoke
  damacy gen smoke s3://bucket/datasets/smoke
  damacy gen --arrays 2 --shape 256,512,512 --codec blosc-lz4 throughput /data/t`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		o := new(datasetFlags)
		o.register(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 2 {
				return usagef("want a scenario and a directory, got %d arguments", len(args))
			}
			sc, err := loadScenario(args[0])
			if err != nil {
				return err
			}
			if err := o.apply(&sc.Dataset); err != nil {
				return err
			}
			if remote.IsURI(args[1]) {
				return genRemote(ctx, e, &sc.Dataset, args[1])
			}
			_, err = ensureDataset(ctx, e, &sc.Dataset, args[1], true)
			return err
		}
	},
}

// datasetFlags are gen's overrides of a scenario's dataset fields.
type datasetFlags struct {
	arrays       int
	shape, chunk int64List
	shard        shardFlag
	dtype, codec string
	level        int
	entropy      float64
	seed         uint64
	shuffle      string
	set          map[string]bool
	fs           *flag.FlagSet
}

func (o *datasetFlags) register(fs *flag.FlagSet) {
	o.fs = fs
	fs.IntVar(&o.arrays, "arrays", 0, "number of arrays (images)")
	fs.Var(&o.shape, "shape", "array shape, e.g. 512,512,512")
	fs.Var(&o.chunk, "chunk", "inner chunk shape")
	fs.Var(&o.shard, "shard", "shard shape, or 'none' for unsharded arrays")
	fs.StringVar(&o.dtype, "dtype", "", "data type, or a comma-separated list cycled over the arrays")
	fs.StringVar(&o.codec, "codec", "", "codec ("+strings.Join(codecNames, ", ")+"), or a comma-separated list")
	fs.IntVar(&o.level, "level", 0, "compression level")
	fs.StringVar(&o.shuffle, "shuffle", "", "blosc shuffle: none, byte or bit")
	fs.Float64Var(&o.entropy, "entropy", 0, "fraction of voxels drawn at random, in [0, 1]")
	fs.Uint64Var(&o.seed, "seed", 0, "data seed")
}

// apply overrides d's fields with the flags that were set, then validates
// d again.
func (o *datasetFlags) apply(d *DatasetSpec) error {
	set := map[string]bool{}
	o.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["arrays"] {
		d.Arrays = o.arrays
	}
	if set["shape"] {
		d.Shape = o.shape
	}
	if set["chunk"] {
		d.Chunk = o.chunk
	}
	if set["shard"] {
		d.Shard = o.shard.shape
	}
	if set["dtype"] {
		d.Dtype = strings.Split(o.dtype, ",")
	}
	if set["codec"] {
		d.Codec = strings.Split(o.codec, ",")
	}
	if set["level"] {
		d.Level = o.level
	}
	if set["shuffle"] {
		d.Shuffle = o.shuffle
	}
	if set["entropy"] {
		d.Entropy = o.entropy
	}
	if set["seed"] {
		d.Seed = o.seed
	}
	if len(set) == 0 {
		return nil
	}
	if err := d.validate(); err != nil {
		var se *scenarioError
		if errors.As(err, &se) {
			return usagef("%v (after the flags)", se)
		}
		return err
	}
	return nil
}

// int64List is a flag holding a comma-separated list of integers.
type int64List []int64

func (l *int64List) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(s, ",")
}

func (l *int64List) Set(s string) error {
	var out []int64
	for part := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a comma-separated list of integers", s)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}

// shardFlag is --shard: a shape, or "none".
type shardFlag struct{ shape int64List }

func (f *shardFlag) String() string { return f.shape.String() }

func (f *shardFlag) Set(s string) error {
	if s == "none" {
		f.shape = nil
		return nil
	}
	return f.shape.Set(s)
}

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

// ensureDataset makes sure dir holds the dataset d, generating it when the
// marker is absent. verbose prints a summary line even when nothing had to
// be generated.
func ensureDataset(ctx context.Context, e *env, d *DatasetSpec, dir string, verbose bool) (*genSummary, error) {
	want := marker(d)
	got, err := os.ReadFile(filepath.Join(dir, markerFile))
	switch {
	case err == nil && bytes.Equal(got, want):
		if verbose {
			fmt.Fprintf(e.stderr, "damacy: %s already holds this dataset; nothing to do\n", dir)
		}
		return &genSummary{Dir: dir, Images: d.Arrays}, nil
	case err == nil:
		return nil, fmt.Errorf("%s holds a different dataset (see its %s); remove it or choose another directory", dir, markerFile)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	s, err := generate(ctx, e, d, dir)
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
	fmt.Fprintf(e.stderr, "damacy: wrote %s to %s: %s raw, %s on disk (ratio %.2f) in %s (%s/s)\n",
		plural(s.Images, "image"), dir, formatBytes(s.RawBytes), formatBytes(s.DiskBytes), ratio,
		s.Elapsed.Round(time.Millisecond), formatBytes(int64(float64(s.RawBytes)/max(s.Elapsed.Seconds(), 1e-9))))
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
func generate(ctx context.Context, e *env, d *DatasetSpec, dir string) (*genSummary, error) {
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
		m, err := writer.CreateNGFF(filepath.Join(dir, arrayName(i)), spec)
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

// genRemote writes the dataset into a temporary directory and uploads it
// to the s3:// URI dst.
func genRemote(ctx context.Context, e *env, d *DatasetSpec, dst string) error {
	if !strings.HasPrefix(strings.ToLower(dst), "s3://") {
		return usagef("gen writes to a local directory or an s3:// URI, not %s", dst)
	}
	tmp, err := os.MkdirTemp("", "damacy-gen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if _, err := ensureDataset(ctx, e, d, tmp, true); err != nil {
		return err
	}
	o, err := remote.NewOpener(remote.Options{})
	if err != nil {
		return err
	}
	defer o.Close()
	t := time.Now()
	if err := o.Upload(ctx, tmp, dst); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "damacy: uploaded to %s in %.1f s\n", dst, time.Since(t).Seconds())
	return nil
}
