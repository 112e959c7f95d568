package pipeline

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/dlpack"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/zarr/remote"
)

// Dtype is the element type of an output tensor.
type Dtype uint8

const (
	F32  Dtype = iota // float32 (the default)
	BF16              // bfloat16, rounded to nearest even; NaN stays NaN
	U8                // uint8, for labels: values pass through, a value that does not fit fails the batch
	I32               // int32, for labels, as U8
	I64               // int64, for labels, as U8
)

var dtypeNames = [...]string{F32: "float32", BF16: "bfloat16", U8: "uint8", I32: "int32", I64: "int64"}

// String returns the type's name ("float32", "bfloat16", "uint8", ...).
func (d Dtype) String() string {
	if d.valid() {
		return dtypeNames[d]
	}
	return "Dtype(" + strconv.Itoa(int(d)) + ")"
}

func (d Dtype) valid() bool { return int(d) < len(dtypeNames) }

// Size is the element size in bytes.
func (d Dtype) Size() int {
	switch d {
	case BF16:
		return 2
	case U8:
		return 1
	case I64:
		return 8
	}
	return 4
}

// dlpack returns the DLPack type of d.
func (d Dtype) dlpack() dlpack.DataType {
	switch d {
	case BF16:
		return dlpack.Scalar(dlpack.Bfloat, 16)
	case U8:
		return dlpack.Scalar(dlpack.UInt, 8)
	case I32:
		return dlpack.Scalar(dlpack.Int, 32)
	case I64:
		return dlpack.Scalar(dlpack.Int, 64)
	}
	return dlpack.Scalar(dlpack.Float, 32)
}

// IsInteger reports whether d is an integer type (a label output).
func (d Dtype) IsInteger() bool { return d == U8 || d == I32 || d == I64 }

// ParseDtype accepts "f32", "float32", "bf16", "bfloat16", "u8", "uint8",
// "i32", "int32", "i64" and "int64" (any case).
func ParseDtype(s string) (Dtype, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "u8", "uint8":
		return U8, nil
	case "i32", "int32":
		return I32, nil
	case "i64", "int64":
		return I64, nil
	}
	return 0, errorf("parse dtype", ErrInvalid, "", "unknown output dtype %q (want f32, float32, bf16, bfloat16, u8, uint8, i32, int32, i64 or int64)", s)
}

// ErrorPolicy says what a pipeline does with a sample that cannot be read
// (Config.OnError).
type ErrorPolicy uint8

const (
	// OnErrorRaise (the default) fails the Pop of the sample's batch with
	// the sample's error; the batch's other samples are not delivered,
	// and the batches after it come as usual.
	OnErrorRaise ErrorPolicy = iota
	// OnErrorSkip leaves the sample out of its batch, which comes out
	// short (an empty batch when every sample was left out), its samples
	// in order, and reports it (Batch.Skipped, Stats.SamplesSkipped, a
	// warning on Config.Logger once per distinct cause).
	OnErrorSkip
)

// String returns "raise" or "skip".
func (e ErrorPolicy) String() string {
	switch e {
	case OnErrorRaise:
		return "raise"
	case OnErrorSkip:
		return "skip"
	}
	return "ErrorPolicy(" + strconv.Itoa(int(e)) + ")"
}

// ParseErrorPolicy accepts "raise" and "skip" ("" is "raise").
func ParseErrorPolicy(s string) (ErrorPolicy, error) {
	switch s {
	case "", "raise":
		return OnErrorRaise, nil
	case "skip":
		return OnErrorSkip, nil
	}
	return 0, errorf("parse on_error", ErrInvalid, "", "unknown error policy %q (want \"raise\" or \"skip\")", s)
}

// Defaults of Config's fields; a zero field means the value here.
const (
	DefaultBatchSize         = 1
	DefaultHostBufferBytes   = 1 << 30   // host engine
	DefaultDeviceBufferBytes = 512 << 20 // host engine
	// The CUDA engine's defaults are larger: waves of about 2,000 chunks
	// of 256 KiB make nvCOMP's batched calls about twice as fast as waves
	// of 1,000 (cmd/damacy/BENCH.md), for 0.5 GiB more pinned memory and
	// more device memory (Stats.GPUBytesCommitted says how much).
	DefaultCUDAHostBufferBytes   = 3 << 29 // 1.5 GiB
	DefaultCUDADeviceBufferBytes = 1 << 30
	DefaultLookaheadBatches      = 2
	DefaultIOConcurrency         = 64
	DefaultBatchSlots            = 3
	DefaultZarrMetaCache         = 64
	DefaultShardIndexCache       = 4096
	DefaultMaxBytesPerElem       = 8
	maxRank                      = 8
)

// Config configures a Pipeline. A zero field means its documented default;
// New rejects an invalid value with the field's name and allowed range.
type Config struct {
	// BatchSize is the number of samples per batch (shape[0] of every
	// batch but a ragged last one). Default 1.
	BatchSize int `json:"batch_size"`
	// SampleShape is the extent of every box, in the arrays' stored axis
	// order, rank 1..8. Empty: the first pushed sample fixes it.
	SampleShape []int `json:"sample_shape"`
	// Dtype is the output element type: F32 (default) or BF16 (or an
	// integer type, for a label array). With Sources, each source has its
	// own and Dtype, if set, must be the first source's.
	Dtype Dtype `json:"dtype"`
	// Sources, when set, makes every batch hold one tensor per source,
	// each read from its own array with the same box (see Source). Empty:
	// one tensor, named DefaultSourceName, from the sample's array.
	Sources []Source `json:"sources"`
	// OnError says what becomes of a sample that cannot be read: its
	// array or a source's missing or unreadable, a chunk that does not
	// decode, a truncated shard, a value that does not fit an integer
	// output, an object store's read that failed after its retries.
	// OnErrorRaise (the default) fails its batch's Pop; OnErrorSkip
	// leaves it out of its batch and goes on (see ErrorPolicy). Errors
	// that are not about one sample (a CUDA error, a budget, shutdown)
	// fail Pop under both.
	OnError ErrorPolicy `json:"on_error"`
	// Augment, when set, transforms every sample as it is assembled:
	// flips, quarter turns, axis permutations, intensity (see Augment).
	Augment *Augment `json:"augment"`
	// HostBufferBytes is the staging memory for compressed chunk bytes
	// (pinned on the CUDA engine, which also mirrors two thirds of it on
	// the GPU), split into slabs. Default 1 GiB; 1.5 GiB on the CUDA
	// engine.
	HostBufferBytes int64 `json:"host_buffer_bytes"`
	// DeviceBufferBytes is the memory for decoded chunks of the waves in
	// flight (device memory on the CUDA engine, host memory on the host
	// engine). Default 512 MiB; 1 GiB on the CUDA engine.
	DeviceBufferBytes int64 `json:"device_buffer_bytes"`
	// LookaheadBatches is how many batches' worth of samples are taken in
	// ahead of the batches the engine fills (BatchSlots - 1 of them while
	// the consumer holds one), so that their metadata and plans are ready
	// in time; at least 2. Default 2. (Counted from the batch being
	// assembled instead, 2 left the planner short with three slots:
	// cmd/damacy/BENCH.md, "the Python front at the engine's speed".)
	LookaheadBatches int `json:"lookahead_batches"`
	// BatchSlots is the number of batch buffers (in GPU memory on the
	// CUDA engine): how many popped batches may be held at once, plus
	// the one being filled while they are held; at least 2. Default 3:
	// a training loop keeps its last batch's tensor until its next step,
	// while the engine fills one slot and has the next batch ready in
	// another (with 2, a loop that keeps one batch slows the engine:
	// cmd/damacy/BENCH.md, "the Python front at the engine's speed").
	// On the CUDA engine a batch's first chunks may share the previous
	// batch's last wave; with no slot free for it then (Pop's caller
	// holding the others), it is assembled once one is given back.
	BatchSlots int `json:"batch_slots"`
	// IOThreads is the number of concurrent readers. Default: the number
	// of CPUs, at least 4 and at most 64.
	IOThreads int `json:"n_io_threads"`
	// IOConcurrency is the number of object-store requests (s3://, gs://,
	// http(s)://) in flight, over all of the pipeline's sources.
	// Default 64.
	IOConcurrency int `json:"io_concurrency"`
	// Remote says how object stores are reached: endpoints, credentials,
	// retries, deadlines, an HTTP client (package zarr/remote documents
	// each field and the environment variables behind its defaults). Its
	// Concurrency is IOConcurrency's.
	Remote remote.Options `json:"-"`
	// RemoteGapBytes is the largest gap between two chunks of one object
	// that one ranged GET bridges (the gap's bytes stream past and are
	// dropped, never staged): a GET costs a round trip and the server's
	// time per request, a gap its bytes. Default 256 KiB.
	RemoteGapBytes int64 `json:"remote_gap_bytes"`
	// RemoteSpanBytes caps the bytes one GET spans, gaps included, so
	// that a wave's bytes spread over IOConcurrency requests. Default
	// 8 MiB.
	RemoteSpanBytes int64 `json:"remote_span_bytes"`
	// ComputeThreads is the number of CPU decode and parse workers.
	// Default: GOMAXPROCS.
	ComputeThreads int `json:"n_compute_threads"`
	// ZarrMetaCache is the capacity of the array metadata LRU. Default 64.
	ZarrMetaCache int `json:"n_zarrs_meta_cache"`
	// ShardIndexCache is the capacity of the shard index LRU. Default 4096.
	ShardIndexCache int `json:"n_shards_meta_cache"`
	// MaxChunkBytes is the largest decoded chunk accepted; a larger chunk
	// fails with ErrBudget naming it. 0 (the default): no cap of its own,
	// the chunks of the arrays opened are sized as they are planned, and
	// any chunk a wave's buffers hold is read (HostBufferBytes for its
	// stored bytes, DeviceBufferBytes for its decoded ones: see the
	// engines' split of them); a larger one fails with ErrBudget saying
	// which of the two to raise, and to what. At most 2 GiB.
	MaxChunkBytes int64 `json:"max_chunk_uncompressed_bytes"`
	// MaxGPUMemoryBytes is a hard cap on the device memory the pipeline
	// reserves (batch slots, wave buffers, decoder scratch, the chunk
	// cache). 0: no cap.
	MaxGPUMemoryBytes int64 `json:"max_gpu_memory_bytes"`
	// ChunkCacheBytes is the size of the chunk cache: decoded chunks kept
	// across batches (in device memory on the CUDA engine, where it counts
	// towards MaxGPUMemoryBytes; in host memory on the host engine), so
	// that a chunk read again, by a later batch or a later epoch, skips its
	// read, copy and decode. 0 (the default): on the host engine a cache of
	// a sixteenth of the memory the process may use (the host's, or less
	// where its cgroup caps it; shared by the loaders a launcher runs on
	// the host, LOCAL_WORLD_SIZE as torchrun sets it), at most 4 GiB,
	// shared by the pipeline's sources (each has a cache of its own), that
	// takes only local compressed chunks and only at their second miss, so
	// that a dataset read once (a scan, or one larger than the cache read
	// at random) costs it little but bookkeeping; none on the CUDA engine,
	// whose device memory is the trainer's. -1: none. A size set here takes
	// every miss. It is
	// reserved whole with the other buffers (so at New, or on the host
	// engine at the first Push when that fixes the sample shape), and
	// holds each chunk in the form the assemble step reads; the least
	// recently used chunks no batch in flight reads make room for new
	// ones. A chunk is found again only while its file
	// is unchanged: local files are checked (size and modification time)
	// once per batch that reads them, and one that changed has its shard
	// index and chunks read again; objects of other stores count as
	// unchanged while their size is cached (Config.ShardIndexCache).
	// Batches planned before the batch that first read a chunk was
	// assembled (the lookahead) read it too. Stats.ChunkCache* report its
	// use. At least 1 MiB when set.
	ChunkCacheBytes int64 `json:"chunk_cache_bytes"`
	// MappedFileBytes bounds the bytes of local files the engines keep
	// mapped, so that their chunks are read straight out of the page cache
	// instead of the IO workers reading them into staging first (which
	// costs host cores: a core for each 2 GB/s or so). The CUDA engine
	// also page-locks the mappings, so the GPU copies from them (one core
	// for each 30 GB/s or so to register a mapping, once); the host engine
	// decodes from them. A file is mapped once reads have fetched as many
	// bytes of it as it holds, so files read once are not mapped, except
	// that a file is mapped at the first read of a MiB or more that covers
	// a quarter of it (copying such a read costs more than mapping the
	// file), by the host engine for any array and by the CUDA engine for
	// an uncompressed one (whose chunks the GPU then copies with no core
	// touching them); the least recently used mappings no wave in flight
	// reads make room for new ones; files larger than a quarter of the
	// bound are always read.
	// Page-locked pages cannot be reclaimed by the kernel while mapped.
	// 0: the default, an eighth of the memory the process may use (the
	// host's, or less where its cgroup caps it) and at most 16 GiB (none
	// where that is unknown); -1: none.
	MappedFileBytes int64 `json:"mapped_file_bytes"`
	// MaxBytesPerElement is the largest source element size accepted
	// (1, 2, 4 or 8). Default 8.
	MaxBytesPerElement int `json:"max_bytes_per_element"`
	// Device selects the engine: "" (default) picks GPU 0 when a CUDA
	// driver and device are present, otherwise the host engine; "cpu" or
	// "host" selects the host engine; "cuda" or "gpu" GPU 0, and "cuda:N"
	// GPU N (N >= 0), failing if there is no such GPU. New rejects any
	// other value with ErrInvalid.
	Device string `json:"-"`
	// Trace, when set, receives a Span for each stretch of work of every
	// stage. It is called from the pipeline's goroutines, concurrently;
	// it must be fast and must not call back into the pipeline.
	Trace func(Span) `json:"-"`
	// Logger receives the few informational lines the pipeline writes
	// (which engine and decoder it uses). Default: slog.Default().
	Logger *slog.Logger `json:"-"`
}

// withDefaults returns a copy of c with zero fields set to their defaults,
// or an error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	bad := func(field string, v any, allowed string) (Config, error) {
		return Config{}, errorf("new", ErrInvalid, "", "Config.%s = %v: must be %s", field, v, allowed)
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchSize < 0 || c.BatchSize > 1<<20 {
		return bad("BatchSize", c.BatchSize, "in 1..1048576")
	}
	if len(c.SampleShape) > maxRank {
		return bad("SampleShape", c.SampleShape, "of rank 1..8")
	}
	c.SampleShape = append([]int(nil), c.SampleShape...)
	for i, n := range c.SampleShape {
		if n <= 0 {
			return bad(fmt.Sprintf("SampleShape[%d]", i), n, "positive")
		}
	}
	if !c.Dtype.valid() {
		return bad("Dtype", c.Dtype, "F32, BF16, U8, I32 or I64")
	}
	if c.OnError > OnErrorSkip {
		return bad("OnError", c.OnError, "OnErrorRaise or OnErrorSkip")
	}
	srcs, err := sourcesOf(&c)
	if err != nil {
		return Config{}, err
	}
	c.Sources = srcs
	if c.Augment != nil {
		if c.Augment, err = c.Augment.checked(srcs); err != nil {
			return Config{}, err
		}
	}
	// Zero buffer sizes stay zero here: each engine has its own defaults
	// (withBuffers).
	if c.HostBufferBytes != 0 && c.HostBufferBytes < 1<<20 {
		return bad("HostBufferBytes", c.HostBufferBytes, "at least 1 MiB (0: the default)")
	}
	if c.DeviceBufferBytes != 0 && c.DeviceBufferBytes < 1<<20 {
		return bad("DeviceBufferBytes", c.DeviceBufferBytes, "at least 1 MiB (0: the default)")
	}
	if c.LookaheadBatches == 0 {
		c.LookaheadBatches = DefaultLookaheadBatches
	}
	if c.LookaheadBatches < 2 || c.LookaheadBatches > 64 {
		return bad("LookaheadBatches", c.LookaheadBatches, "in 2..64")
	}
	if c.BatchSlots == 0 {
		c.BatchSlots = DefaultBatchSlots
	}
	if c.BatchSlots < 2 || c.BatchSlots > 64 {
		return bad("BatchSlots", c.BatchSlots, "in 2..64")
	}
	if c.IOThreads == 0 {
		c.IOThreads = min(max(runtime.NumCPU(), 4), 64)
	}
	if c.IOThreads < 1 || c.IOThreads > 1024 {
		return bad("IOThreads", c.IOThreads, "in 1..1024")
	}
	if c.IOConcurrency == 0 {
		c.IOConcurrency = DefaultIOConcurrency
	}
	if c.IOConcurrency < 1 || c.IOConcurrency > 4096 {
		return bad("IOConcurrency", c.IOConcurrency, "in 1..4096")
	}
	c.Remote.Concurrency = c.IOConcurrency
	if c.RemoteGapBytes == 0 {
		c.RemoteGapBytes = plan.RemoteGapBytes
	}
	if c.RemoteGapBytes < 1 || c.RemoteGapBytes > 1<<30 {
		return bad("RemoteGapBytes", c.RemoteGapBytes, "in 1..1 GiB")
	}
	if c.RemoteSpanBytes == 0 {
		c.RemoteSpanBytes = plan.RemoteSpanBytes
	}
	if c.RemoteSpanBytes < 1 || c.RemoteSpanBytes > 1<<30 {
		return bad("RemoteSpanBytes", c.RemoteSpanBytes, "in 1..1 GiB")
	}
	if err := c.Remote.Validate(); err != nil {
		return Config{}, newError("new", ErrInvalid, "", fmt.Errorf("Config.Remote: %w", err))
	}
	if c.ComputeThreads == 0 {
		c.ComputeThreads = runtime.GOMAXPROCS(0)
	}
	if c.ComputeThreads < 1 || c.ComputeThreads > 1024 {
		return bad("ComputeThreads", c.ComputeThreads, "in 1..1024")
	}
	if c.ZarrMetaCache == 0 {
		c.ZarrMetaCache = DefaultZarrMetaCache
	}
	if c.ZarrMetaCache < 1 {
		return bad("ZarrMetaCache", c.ZarrMetaCache, "positive")
	}
	if c.ShardIndexCache == 0 {
		c.ShardIndexCache = DefaultShardIndexCache
	}
	if c.ShardIndexCache < 1 {
		return bad("ShardIndexCache", c.ShardIndexCache, "positive")
	}
	if c.MaxChunkBytes < 0 || c.MaxChunkBytes > 1<<31 {
		return bad("MaxChunkBytes", c.MaxChunkBytes, "0 (what the buffers hold) or in 1..2 GiB")
	}
	if c.MaxGPUMemoryBytes < 0 {
		return bad("MaxGPUMemoryBytes", c.MaxGPUMemoryBytes, "0 (no cap) or positive")
	}
	if c.ChunkCacheBytes < -1 || c.ChunkCacheBytes > 0 && (c.ChunkCacheBytes < 1<<20 || c.ChunkCacheBytes > 1<<46) {
		return bad("ChunkCacheBytes", c.ChunkCacheBytes, "-1 (none), 0 (the default) or in 1 MiB..64 TiB")
	}
	if c.MappedFileBytes < -1 {
		return bad("MappedFileBytes", c.MappedFileBytes, "-1 (none), 0 (the default) or positive")
	}
	if c.MaxBytesPerElement == 0 {
		c.MaxBytesPerElement = DefaultMaxBytesPerElem
	}
	switch c.MaxBytesPerElement {
	case 1, 2, 4, 8:
	default:
		return bad("MaxBytesPerElement", c.MaxBytesPerElement, "1, 2, 4 or 8")
	}
	if _, _, err := parseDevice(c.Device); err != nil {
		return Config{}, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// deviceKind is what Config.Device asks for.
type deviceKind uint8

const (
	deviceAuto deviceKind = iota
	deviceHost
	deviceCUDA
)

func parseDevice(s string) (deviceKind, int, error) {
	switch s {
	case "":
		return deviceAuto, 0, nil
	case "cpu", "host":
		return deviceHost, 0, nil
	case "cuda", "gpu":
		return deviceCUDA, 0, nil
	}
	if rest, ok := strings.CutPrefix(s, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return deviceCUDA, n, nil
		}
	}
	return 0, 0, errorf("new", ErrInvalid, "", "Config.Device = %q: must be \"\", \"cpu\", \"cuda\" or \"cuda:N\"", s)
}

// chunkLimit is the largest decoded chunk an engine of c (its buffers
// filled in by withBuffers) may meet: MaxChunkBytes when set, else the
// larger of its buffers; the plan checks each chunk against a wave's
// share of them (cutWaves).
func (c Config) chunkLimit() int64 {
	if c.MaxChunkBytes > 0 {
		return c.MaxChunkBytes
	}
	return min(max(c.HostBufferBytes, c.DeviceBufferBytes), 1<<31)
}

// maxDefaultChunkCache caps the host engine's default chunk cache.
const maxDefaultChunkCache = 4 << 30

// chunkCache resolves ChunkCacheBytes for an engine (the CUDA engine's
// when gpu is true): the cache's size, 0 for none, and whether it is the
// default cache, which takes a chunk only at its second miss. A size set
// is kept, -1 is none, and 0 is the default (ChunkCacheBytes).
func (c Config) chunkCache(gpu bool) (size int64, secondMiss bool) {
	switch {
	case c.ChunkCacheBytes > 0:
		return c.ChunkCacheBytes, false
	case c.ChunkCacheBytes < 0 || gpu:
		return 0, false
	}
	n := defaultChunkCache(memoryLimit(), LoadersPerHost(os.Getenv))
	if k := len(c.Sources); k > 1 {
		n /= int64(k) // each source's engine has a cache of its own
	}
	if n >= 1<<20 {
		return n, true
	}
	return 0, false
}

// defaultChunkCache is the default cache's size: a sixteenth of memory,
// shared by the loaders a launcher runs on the host (LoadersPerHost), at
// most maxDefaultChunkCache.
func defaultChunkCache(memory int64, loaders int) int64 {
	return min(memory/16/int64(max(loaders, 1)), maxDefaultChunkCache)
}

// LoadersPerHost returns how many loaders a launcher runs on this host,
// each of which should take its share of the host's cores and memory:
// LOCAL_WORLD_SIZE as getenv reads it (torchrun sets it to the ranks per
// host; the Python client multiplies it by the workers of a DataLoader
// whose workers each run a loader), 1 where it is unset or not a number
// above 1.
func LoadersPerHost(getenv func(string) string) int {
	if n, err := strconv.Atoi(getenv("LOCAL_WORLD_SIZE")); err == nil && n > 1 {
		return n
	}
	return 1
}

// withBuffers fills zero buffer sizes with the engine's defaults: the CUDA
// engine's when gpu is true, else the host engine's.
func (c Config) withBuffers(gpu bool) Config {
	host, dev := int64(DefaultHostBufferBytes), int64(DefaultDeviceBufferBytes)
	if gpu {
		host, dev = DefaultCUDAHostBufferBytes, DefaultCUDADeviceBufferBytes
	}
	if c.HostBufferBytes == 0 {
		c.HostBufferBytes = host
	}
	if c.DeviceBufferBytes == 0 {
		c.DeviceBufferBytes = dev
	}
	return c
}
