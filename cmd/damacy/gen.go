package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/cmd/damacy/internal/bench"
	"github.com/damacy-go/damacy/zarr/remote"
)

var cmdGen = &command{
	name:  "gen",
	usage: "gen [flags] SCENARIO.json DIR|s3://BUCKET/PATH",
	short: "write a scenario's synthetic dataset",
	long: `Gen writes the dataset of a scenario (a file, or a built-in name: see
'damacy help bench') into DIR: one OME-NGFF 0.5 image per array, named
a000, a001, ..., each over a sharded zarr v3 array, and with dataset.labels
an OME-NGFF label image beside each (labels/<name>: blobs of a few label
values, the image brighter inside them). Shards are generated,
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
directory, then uploaded, one PUT per file (16 at once), its
damacy-dataset.json last; the local copy is removed. --local DIR writes
it in DIR instead (or takes it from there when DIR already holds it) and
keeps it, so that 'damacy bench' can read both copies. A URI whose
damacy-dataset.json is already this dataset's is left as it is.

Examples:
  damacy gen smoke /data/smoke
  damacy gen smoke s3://bucket/datasets/smoke
  damacy gen --local /data/smoke smoke s3://bucket/datasets/smoke
  damacy gen --arrays 2 --shape 256,512,512 --codec blosc-lz4 throughput /data/t`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		o := new(datasetFlags)
		o.register(fs)
		local := fs.String("local", "", "with an s3:// destination: generate the dataset in this directory (or take it from there) and keep it")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 2 {
				return usagef("want a scenario and a directory, got %d arguments", len(args))
			}
			sc, err := bench.LoadScenario(args[0])
			if err != nil {
				return err
			}
			if err := o.apply(&sc.Dataset); err != nil {
				return err
			}
			if remote.IsURI(args[1]) {
				return genRemote(ctx, e, &sc.Dataset, args[1], *local)
			}
			if *local != "" {
				return usagef("--local is for an s3:// destination; %s is a directory", args[1])
			}
			return bench.EnsureDataset(ctx, e.bench(), &sc.Dataset, args[1])
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
	fs.StringVar(&o.codec, "codec", "", "codec ("+strings.Join(bench.CodecNames(), ", ")+"), or a comma-separated list")
	fs.IntVar(&o.level, "level", 0, "compression level")
	fs.StringVar(&o.shuffle, "shuffle", "", "blosc shuffle: none, byte or bit")
	fs.Float64Var(&o.entropy, "entropy", 0, "fraction of voxels drawn at random, in [0, 1]")
	fs.Uint64Var(&o.seed, "seed", 0, "data seed")
}

// apply overrides d's fields with the flags that were set, then validates
// d again.
func (o *datasetFlags) apply(d *bench.DatasetSpec) error {
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
	if err := d.Validate(); err != nil {
		var se *bench.ScenarioError
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

// genRemote uploads the dataset to the s3:// URI dst from the local
// directory local, where it is generated unless already there; an empty
// local means a temporary directory, removed afterwards.
func genRemote(ctx context.Context, e *env, d *bench.DatasetSpec, dst, local string) error {
	if !strings.HasPrefix(strings.ToLower(dst), "s3://") {
		return usagef("gen writes to a local directory or an s3:// URI, not %s", dst)
	}
	if local == "" {
		tmp, err := os.MkdirTemp("", "damacy-gen-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		local = tmp
	}
	return bench.UploadDataset(ctx, e.bench(), d, local, dst)
}
