// Package pipeline streams boxes cut out of zarr arrays into batches of
// float32 or bfloat16 tensors (or integer tensors, for labels), in GPU
// memory (the CUDA engine) or in host memory (the host engine).
//
// It owns: Config, Sample, Pipeline, Batch, Stats, Span and the error type;
// the planner, metadata caches, IO, staging, decode and assemble stages.
// All memory is reserved at New (batch slots at the first Push when the
// sample shape comes from it); a configuration that cannot work fails
// there with ErrBudget naming the field to raise.
//
// # Data flow
//
// Push (or PushSeq) queues samples; a feeder moves them into the lookahead
// as it has room, and a batcher cuts batches (Flush cuts a ragged one).
// Both engines then run the same stages, each on its own goroutine:
//
//   - plan: open arrays (an LRU of metadata) and plan every box with
//     package zarr through an LRU of shard indexes; a chunk several samples
//     need is one job; jobs are sorted by file and offset, packed into
//     waves that fit a staging slab and a decode arena, and adjacent reads
//     are coalesced under a cap.
//   - read: IO workers pread each wave's ranges into a staging slab through
//     an open-file cache (single-flight opens, bounded by RLIMIT_NOFILE).
//   - decode and assemble: the host engine's CPU tasks each decode a chunk
//     (into the worker's scratch buffer, or the arena for large chunks and
//     those the chunk cache keeps) and at once run the ptx.HostAssembly
//     ops that read it into the batch slot. The CUDA engine routes each
//     chunk at plan time (the GPU for every chunk it may take: zstd, LZ4
//     and blosc, with nvCOMP loaded; a CPU worker for the other codecs and
//     for arrays where the GPU already refused a chunk), checks the bytes
//     on CPU workers (checksums, zstd frame and block headers, blosc
//     frames, whose zstd or LZ4 streams become nvCOMP entries and whose
//     blosclz streams entries of ptx's blosclz kernel), copies the slab's
//     used prefix with the decoders' argument arrays and the assemble ops
//     in one H2D copy, walks the LZ4 blocks on the GPU (ptx's LZ4 check
//     kernel), decodes with nvCOMP and the blosclz kernel into the wave's
//     arena, reduces the statuses on the device, and runs the assemble
//     kernel (which also undoes blosc's shuffles), on copy, decode and
//     assemble streams chained by events; a retire thread waits on each
//     wave in order (with a deadline), and decodes again on the CPU any
//     chunk the GPU did not, then reassembles that wave.
//
// On the CUDA engine a wave may span batches: an nvCOMP call takes about
// as long for a few chunks as for a full wave, so the planner keeps each
// batch's last wave back while it plans the next request (if one is
// already queued, never waiting for one) and packs that batch's first
// chunks after it, in the same slab and arena (the next batch's first
// wave is carried). The wave is read, checked, decoded and laid out as
// one; each batch's part is assembled into its own slot and fails alone.
// A wave is copied and decoded before its batches take their slots, so
// decoding goes on while the consumer holds slots; a joining batch whose
// slot is not free when its wave is assembled is assembled late, once
// Pop's caller gives one back.
//
// # Training-ready batches
//
// With Config.Sources a sample reads one box from several arrays (an
// image and its OME-NGFF label, a mask, channels kept apart): each source
// has an engine of its own (a lane), fed by one intake. The batcher hands
// each batch to every lane in turn, each sample as that source reads it:
// its array found from the sample's URI, its axes matched to the box's by name (a label without the image's channel
// axis drops it). Pop takes one result from each lane and returns one
// Batch with a Tensor per source; Stats adds the lanes' up.
//
// With Config.Augment each sample's transform (flips, quarter turns,
// equal-extent permutations, an intensity map) is drawn from its seed when
// its batch is cut, projected onto each source's axes, and handed to the
// engines with the batch: the assemble plan carries it to the kernel (and
// its host twin), which applies it while it writes the batch, as it
// converts each element. An integer output
// takes values as they are; the kernel counts those that do not fit, and
// the batch fails with ErrDtype.
//
// With Config.ChunkCacheBytes, planning looks every chunk up in the chunk
// cache first: a hit skips read, copy and decode, its copy ops reading
// the cache region (addressed from the same base as the wave's arena); a
// miss is copied into the cache once its wave has been assembled.
//
// With Config.MappedFileBytes (on by default), both engines map local
// files that waves keep reading: a wave's reads of a mapped file skip the
// IO workers. The host engine decodes from the mapping; the CUDA engine
// registers the mappings with the driver, its CPU checks read the page
// cache through the mapping, and the H2D copy takes those bytes straight
// from it.
//
// # Errors: where each surfaces and what it names
//
// Push checks each sample's form (a URI, the box's rank and extents, the
// level) and returns the first bad one's error, naming its index in the
// call: the samples before it stay queued, those after it are not. Push
// never opens an array; Check does, and reports at once what the batch
// would fail with (a missing array or source, a type or rank that cannot
// be read): damacy serve's push calls it first, which gives Python's
// Pipeline.push the reference's semantics. A PushSeq sequence's malformed
// sample ends the sequence, and fails the Pop of the batch it would have
// joined.
//
// Whatever else is wrong with a sample fails the Pop of its own batch: its
// array or a source's missing or unreadable (ErrNotFound, ErrStorage,
// ErrInvalid), a type or rank that cannot be read (ErrDtype, ErrRank), a
// truncated shard or a chunk that does not decode (ErrDecode), an object
// store's read that failed after its retries (ErrStorage), a value that
// does not fit an integer output (ErrDtype). The batch's other samples are
// not delivered, and the next Pop returns the next batch. Such an error
// names the sample: Error.Position (its place in the intake, counted from
// 1), its URI, its Source (with several sources), the Chunk (the store key
// of the chunk or shard, relative to the URI) where there is one, and the
// cause; Op reads "(sample N: URI[box])". A chunk that several samples
// read names the first of them. ErrCUDA (the context is lost) fails every
// later batch too; ErrShutdown ends the stream.
//
// Config.OnError's OnErrorSkip leaves such a sample out of its batch
// instead: the batch comes out short, in order (empty when none is left),
// and each sample left out is reported once, by an error of the same
// form, in Batch.Skipped, counted in Stats.SamplesSkipped, and warned
// about on Config.Logger once per distinct cause; a sequence's malformed
// sample is left out and the sequence goes on. A batch that
// fails reaches Pop with its slot, and Pop reads it again, one sample at a
// time, on the CPU, the way the host engine reads (so the samples kept are
// exactly what the engine would have assembled). Errors that are not
// about one sample (ErrCUDA, ErrBudget, ErrOutOfMemory, ErrShutdown,
// ErrCanceled) fail Pop as before, and Push's checks still return theirs.
//
// Imports: the standard library; zarr (with zarr/blosc and zarr/remote),
// cuda, nvcomp, ptx and dlpack; and the module's internal packages
// internal/plan (the zarr-level plan of a batch, the assemble ops, the
// rule for what the GPU's decoders receive), internal/cache (the LRU, a caching
// zarr.Locator, the open-file cache) and internal/work (the worker pool),
// which damacy bench's ceilings use too.
// Package pipeline/sampler builds on it, and the command (cmd/damacy: its
// server and its bench) drives it.
package pipeline
