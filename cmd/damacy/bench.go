package main

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cmd/damacy/internal/bench"
	"github.com/damacy-go/damacy/cmd/damacy/internal/netshape"
)

var cmdBench = &command{
	name:  "bench",
	usage: "bench [--json] [--drop-cache] [--duration D] [--compare] [--trace FILE] [--profile FILE] [--data DIR|URI] [--link RTT,RATE] [--boxes-out FILE] [--gets-out FILE] [--boxes chunks|SHAPE] [flags] SCENARIO.json|ARRAY",
	short: "run a benchmark scenario, or read an array, and report throughput, stages and ceilings",
	long: `Bench runs a scenario: it generates the dataset if it is absent (as 'damacy
gen' does), draws the boxes from the run's seed, streams the warm-up
batches, resets the statistics, streams the measured batches (sleeping
hold_ms between each pop and release, as a training step would), and
reports:

  throughput        output-tensor bytes in the output dtype / wall time of
                    the measured batches (damacy's definition), samples/s,
                    and the boxes' bytes in the source dtype / wall
  stages            per-stage busy time, count, best, bytes in and out
  read amplification  bytes read / bytes of the boxes in the source dtype
  caches            metadata and shard index hits and misses, and the
                    chunk cache's when the run has one
                    (run.config.chunk_cache_bytes, or the host
                    engine's default one)
  epochs            for a run of several epochs (run.epochs): each epoch's
                    rate and chunk cache hits, epoch 1 against the others
  sources           for a run of several sources (run.config.sources: an
                    image and its label): each tensor's output GB/s; the
                    throughput counts every tensor's bytes

and then the ceilings, measured in the same run over the same boxes:

  pread replay      the chunk byte ranges the measured boxes need (planned
                    again with package zarr, batch by batch, each chunk once
                    per batch), read with as many goroutines as the run had
                    IO threads into a staging buffer of up to 1 GiB, one
                    range after another, as the run reads into its slabs
  GET replay        instead of the pread replay when the dataset is remote:
                    the same chunks, batch by batch, merged into ranged GETs
                    as the run merges them (gaps up to
                    run.config.remote_gap_bytes, by default 256 KiB; up to
                    run.config.remote_span_bytes, 8 MiB, per GET),
                    fetched through the same kind of store with as many GETs
                    in flight as the run had (io_concurrency) into a staging
                    buffer of up to 1 GiB
  decode-only       those chunks decoded on the CPU, one decoder per core;
                    and, when the CUDA engine decoded on the GPU, what it
                    sends the GPU of them (zstd and LZ4 chunks and the
                    streams of blosc chunks to nvCOMP, LZ4 with its GPU
                    check; blosclz streams to damacy's kernel), per codec
                    in one batched call as large as one of the run's waves
                    (half of device_buffer_bytes, at most 512 MiB)
  assemble-only     one batch gathered and cast from decoded chunks by the
                    assemble code the engines run (on the CPU; and on the
                    GPU for the CUDA engine)
  h2d               pinned host-to-device copies at the run's average copy
                    size (CUDA engine only)

--data s3://bucket/path (or gs://, http://, https://) reads a copy of the
dataset from an object store or web server, as 'damacy gen SCENARIO
s3://bucket/path' uploads it: the copy's damacy-dataset.json must be the
scenario's (it is never generated from bench), the boxes are drawn as for
local data (same seed, same boxes), and the report names the scheme and
the endpoint (credentials and endpoint as for 'damacy read').

--link RTT[,RATE] (say 10ms,10Gbit) reads a remote dataset through a TCP
proxy on loopback that delays each direction by RTT/2 and caps each
direction's bandwidth at RATE (bit/s: Gbit, Mbit, kbit), shared by every
connection, with bandwidth x delay in flight: a far server, on one host.
Every request of the run goes through it (plain http endpoints only); the
report gives the bytes it carried down over the measured batches and, with
a RATE, how busy that kept the link (bytes / (RATE x wall)), and the GET
replay's share too.

--gets-out FILE writes the GETs of the GET replay (each object's key, the
offset and the length, in the order the replay issues them) as JSON, for a
load generator on another client stack to issue the same
(cmd/damacy/peers/getload).

Each ceiling is also given as output GB/s: its rate over the bytes its
stage handled per byte of output while the measured batches were popped
(per out), both the run's own counters, every source's: a replay by the
bytes the run read (by pread only, for the pread replay: not those it
copied from mapped files), decode-only by the bytes it decoded (the GPU's
by the part of them it takes), h2d by the bytes it copied. The run reads
and decodes a chunk once per batch however many of its boxes use it, as
the replays and decode-only do; the work of the batches planned ahead,
done before the measured batches began, is not counted, so each figure
is an upper bound of the throughput with that stage alone to do. The
throughput is given as a fraction of the lowest one. With several
sources the replays and decode-only take every source's chunks, and
assemble-only times every source's batch (with the run's transforms) one
after the other: its figure is the output's rate through them all, each
source weighted by its share of the output.

--compare (or run.compare) measures, after the run and before the
ceilings, over the same boxes, as many batches as the run measured after
the same warm-up, holding batches as the run held them:

  without augment   the run's pipeline without run.config.augment: the
                    augmentation's cost, 100 * (1 - throughput / this)
  one pipeline per  one pipeline per source, each reading its source alone
  source            (its array, its axes of the box, its buffers, 1/n of
                    run.config.max_gpu_memory_bytes, the same geometric
                    transforms), all at once, one batch popped from each
                    in turn: the run's throughput over theirs together

With --verify each comparison's first batches are checked too.

--duration D streams the measured batches for D (say 20m) instead of the
scenario's count: past the scenario's boxes it draws more from the seed
(a scenario of several epochs runs more epochs). Every second it samples
GPU memory committed (Stats.GPUBytesCommitted), the device's used memory
(cuMemGetInfo, all processes), the process's resident memory and the
throughput of the second past; the report gives min, max and last of
each, compares the averages of the first and the last minute (a third of
the run when shorter) and flags memory that grew, and on the CUDA engine
checks the largest samples against run.config.max_gpu_memory_bytes and
host_buffer_bytes + 256 MiB.
--json includes every sample. Startup is always reported: the time from
the call to pipeline.New to the first batch popped.

--trace FILE writes Chrome trace-event JSON (open it in Perfetto or
chrome://tracing): the run's phases, each pop and consumer hold, and the
pipeline's stage spans on one row per lane: the planner, each IO worker
(its reads of each wave), each CPU worker (its decoding of each wave), and
on the CUDA engine each wave's layout (prepare) and submission (submit),
the retire thread's wait for it (retire), the mapping of hot files (io
stage), and the copy, decode and assemble streams (each wave's H2D copy,
nvCOMP decode and assembly, placed on the host clock from CUDA events).

--profile FILE writes a CPU profile of the measured batches (the whole
process: the pipeline's workers and the harness) for go tool pprof.

SCENARIO is a file or a built-in name: ` + strings.Join(bench.BuiltinNames(), ", ") + `.
The zarrbench-* scenarios mirror the arrays of the public zarr benchmark
(LDeakin/zarr_benchmarks) and read them chunk by chunk.

ARRAY, a local directory holding a zarr array or an OME-NGFF image (its
level --level), is read as it is, with the default configuration and f32
out: "how fast on my data?". By default every chunk is read once, one box
per chunk of its chunk grid (its shards when sharded), 4 per batch, no
warm-up; --boxes SHAPE reads random boxes of that shape instead, as many
batches as hold the array's voxels once (or --batches).

--boxes chunks reads every chunk once (run.boxes chunks); --boxes SHAPE
(say 128,128,128) random boxes of that shape. --batch-size, --batches,
--warmup and --dtype override the run's fields.

` + bench.ScenarioHelp + `

Examples:
  damacy bench smoke
  damacy bench zarrbench-sharded
  damacy bench --boxes 128,128,128 zarrbench-compressed
  damacy bench /data/my-image.ome.zarr
  damacy bench --boxes 64,256,256 --batch-size 8 --batches 100 --engine host /data/my-array.zarr
  damacy bench --drop-cache --json --boxes-out boxes.json throughput
  damacy bench --duration 20m --json throughput > soak.json
  damacy bench epochs
  damacy bench --verify segmentation
  damacy bench --trace run.json --data /nvme/bench cmd/damacy/internal/bench/scenarios/default.json
  damacy gen throughput s3://bucket/bench/throughput && damacy bench --data s3://bucket/bench/throughput throughput
  damacy bench --data s3://bucket/bench/throughput --link 10ms,10Gbit --ceilings=false throughput`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		var o bench.Options
		asJSON := fs.Bool("json", false, "write the report as JSON")
		fs.BoolVar(&o.DropCache, "drop-cache", false, "drop the dataset's files from the page cache before the run and before the pread replay (posix_fadvise DONTNEED)")
		fs.StringVar(&o.Trace, "trace", "", "write a Chrome trace-event JSON file of the run's spans")
		fs.StringVar(&o.Profile, "profile", "", "write a CPU profile (go tool pprof) of the measured batches")
		fs.StringVar(&o.Data, "data", "", "dataset directory, or the URI of a remote copy (overrides the scenario's dataset.dir)")
		ioConc := fs.Int("io-concurrency", 0, "override run.config.io_concurrency: object-store requests in flight for a remote dataset")
		var gap, span bench.ByteSize
		fs.Var(&gap, "remote-gap", "override run.config.remote_gap_bytes: the largest gap between two chunks of one object that one GET bridges (256KiB, 1MiB)")
		fs.Var(&span, "remote-span", "override run.config.remote_span_bytes: the most one GET spans, gaps included (8MiB)")
		link := fs.String("link", "", "read a remote dataset through a loopback proxy shaped as RTT[,RATE]: 10ms,10Gbit")
		fs.StringVar(&o.GetsOut, "gets-out", "", "write the GET replay's GETs (key, offset, length) to this JSON file, for a load generator")
		fs.StringVar(&o.BoxesOut, "boxes-out", "", "write the boxes read to this JSON file (for the peers)")
		fs.BoolVar(&o.Ceilings, "ceilings", true, "measure the ceilings after the run")
		engine := fs.String("engine", "", "override run.engine: auto, host, cuda or cuda:N")
		mapped := fs.String("mapped-files", "", "override run.config.mapped_file_bytes: auto, off, or a size")
		fs.BoolVar(&o.Verify, "verify", false, "check the first batch popped (a warm-up batch when there is one), every tensor, against the reference reader")
		fs.BoolVar(&o.Compare, "compare", false, "measure the comparisons (run.compare): the same boxes without run.config.augment, and one pipeline per source")
		keep := fs.Bool("keep", false, "override run.keep: keep each batch until the next one is popped, as a training loop keeps its tensor until its next step")
		slots := fs.Int("batch-slots", 0, "override run.config.batch_slots (0: the scenario's)")
		fs.DurationVar(&o.Duration, "duration", 0, "stream the measured batches for this long instead of the scenario's count, sampling memory and throughput every second")
		var ov bench.RunOverrides
		fs.StringVar(&ov.Boxes, "boxes", "", "chunks: read every chunk once, one box per chunk; or a box shape (128,128,128): random boxes of that shape")
		fs.IntVar(&ov.BatchSize, "batch-size", 0, "override run.config.batch_size (an array: 4)")
		fs.IntVar(&ov.Batches, "batches", 0, "override run.batches: measured batches")
		fs.IntVar(&ov.Warmup, "warmup", -1, "override run.warmup: batches popped before the measured ones")
		fs.StringVar(&ov.Dtype, "dtype", "", "override run.config.dtype: f32 or bf16")
		level := fs.Int("level", 0, "an OME-NGFF image ARRAY: the multiscale level read")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return usagef("want one scenario or array, got %d arguments", len(args))
			}
			if o.Duration < 0 || (o.Duration > 0 && o.Duration < time.Second) {
				return usagef("--duration %v: want at least 1s (0: the scenario's batch count)", o.Duration)
			}
			var sc *bench.Scenario
			var err error
			if bench.IsArray(args[0]) {
				sc, err = bench.ArrayScenario(args[0], *level)
			} else if *level != 0 {
				return usagef("--level applies to an OME-NGFF image, not to scenario %s", args[0])
			} else {
				sc, err = bench.LoadScenario(args[0])
			}
			if err != nil {
				return err
			}
			if err := sc.Override(ov); err != nil {
				return err
			}
			if o.Compare && !sc.Comparable() {
				return usagef("--compare: scenario %s has neither run.config.augment nor several run.config.sources: nothing to compare", sc.Name)
			}
			if *engine != "" {
				if _, err := base.EngineDevice(*engine); err != nil {
					return usagef("--engine %v", err)
				}
				sc.Run.Engine = *engine
			}
			if *mapped != "" {
				v, err := bench.MappedFileBytes(*mapped)
				if err != nil {
					return usagef("--mapped-files %v", err)
				}
				sc.Run.Config.MappedFileBytes = v
			}
			if *keep {
				sc.Run.Keep = true
			}
			if *slots != 0 {
				sc.Run.Config.BatchSlots = *slots
			}
			if *ioConc != 0 {
				if *ioConc < 1 || *ioConc > 4096 {
					return usagef("--io-concurrency %d: must be in 1..4096", *ioConc)
				}
				sc.Run.Config.IOConcurrency = *ioConc
			}
			if gap != 0 {
				if gap > 1<<30 {
					return usagef("--remote-gap %v: must be at most 1 GiB", gap)
				}
				sc.Run.Config.RemoteGapBytes = int64(gap)
			}
			if span != 0 {
				if span > 1<<30 {
					return usagef("--remote-span %v: must be at most 1 GiB", span)
				}
				sc.Run.Config.RemoteSpanBytes = int64(span)
			}
			if *link != "" {
				l, err := netshape.ParseLink(*link)
				if err != nil {
					return usagef("--link %v", err)
				}
				o.Link = &l
			}
			rep, err := bench.Run(ctx, e.bench(), sc, o)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, rep)
			}
			rep.WriteText(e.stdout)
			return nil
		}
	},
}

// bench is where the benchmark harness writes: e's stderr, with a status
// line when it is a terminal, and the pipeline's log lines.
func (e *env) bench() bench.Env {
	return bench.Env{Stderr: e.stderr, Progress: e.progress, Logger: newLogger(e.stderr)}
}
