package nvcomp

import (
	"fmt"
	"math"
	"strconv"

	"github.com/damacy-go/damacy/cuda"
)

// DecoderConfig sizes a Decoder. Every field but MaxTotalBytes is required.
type DecoderConfig struct {
	// Algorithm is Zstd or LZ4.
	Algorithm Algorithm
	// MaxChunks is the most chunks one Decode call takes.
	MaxChunks int
	// MaxChunkBytes bounds every output capacity (and so every
	// decompressed chunk) of a Decode call: at most 2^31-1 for zstd and
	// 2^32-1 for LZ4.
	MaxChunkBytes int
	// MaxTotalBytes bounds the sum of the output capacities of one Decode
	// call; 0 means MaxChunks×MaxChunkBytes. zstd's temp space grows with
	// it (about three bytes of temp per output byte with nvCOMP 6.0), so a
	// tighter bound saves device memory.
	MaxTotalBytes int
}

// Decoder decompresses batches of zstd frames or raw LZ4 blocks on the GPU
// with nvCOMP's batched API. Its temp space is sized (GetTempSize*) and
// allocated once, in NewDecoder; Decode allocates nothing, neither device
// nor Go memory on amd64, and only enqueues work.
//
// NewDecoder, Decode and Close call the CUDA runtime inside nvCOMP, which
// works on the context current on the calling OS thread: call them on a
// cuda.Executor (Do) or under cuda.LockThread with the primary context.
//
// A Decoder serves one batch at a time: every Decode reuses the same temp
// space, so calls must be ordered, by issuing them on one stream or by
// making a stream wait for the previous call's stream (Stream.WaitEvent).
// It is not safe for concurrent use.
type Decoder struct {
	codec     *codec
	cfg       DecoderConfig
	align     Alignment
	temp      cuda.DevicePtr
	tempBytes int
	call      decompressCall
	args      decompressArgs
}

// decompressArgs are the arguments of nvcompBatched<Alg>DecompressAsync, in
// order, apart from the options struct.
type decompressArgs struct {
	inPtrs, inBytes, outCapacities, outSizes, n, temp, tempBytes, outPtrs, statuses, stream uintptr
}

// MaxZstdBatchBytes is the largest MaxTotalBytes that NewDecoder accepts
// for zstd. With nvCOMP 6.0 on an H200, batches of 4096 valid chunks of
// 256 KiB and of 1 MiB (1 and 4 GiB of output) made the decompression
// kernel fault with an illegal address in two throughput runs (four
// faults: both geometries, plain and byte-shuffled data), although the
// temp space was sized by nvCOMP's own query, while the same geometries
// passed in other runs: the fault depends on the data and the layout.
// No batch of up to 512 MiB failed, on 5.3 or 6.0. Larger waves must be
// split; at 512 MiB the GPU is already past its knee (cmd/damacy/BENCH.md,
// "nvCOMP decode alone").
const MaxZstdBatchBytes = 512 << 20

// NewDecoder returns a Decoder for cfg. It queries the temp size and
// the alignment requirements once and allocates the temp space with
// cuMemAlloc in the current context; Close frees it.
func (l *Library) NewDecoder(cfg DecoderConfig) (*Decoder, error) {
	if l == nil {
		return nil, errNoLibrary
	}
	if cfg.MaxTotalBytes == 0 && cfg.MaxChunks > 0 && cfg.MaxChunkBytes > 0 {
		if cfg.MaxChunkBytes > math.MaxInt/cfg.MaxChunks {
			return nil, fmt.Errorf("nvcomp: %s: %d chunks of %d bytes overflow int", cfg.Algorithm, cfg.MaxChunks, cfg.MaxChunkBytes)
		}
		cfg.MaxTotalBytes = cfg.MaxChunks * cfg.MaxChunkBytes
	}
	if cfg.Algorithm == Zstd && cfg.MaxTotalBytes > MaxZstdBatchBytes {
		return nil, fmt.Errorf("nvcomp: zstd: max total bytes %d (%d chunks of %d bytes) over the %d that nvCOMP decodes reliably; split the batch",
			cfg.MaxTotalBytes, cfg.MaxChunks, cfg.MaxChunkBytes, MaxZstdBatchBytes)
	}
	return l.newDecoder(cfg)
}

// newDecoder is NewDecoder without the zstd batch limit, for the tests
// that probe it.
func (l *Library) newDecoder(cfg DecoderConfig) (*Decoder, error) {
	c, err := l.codec(cfg.Algorithm)
	if err != nil {
		return nil, err
	}
	if err := checkGeometry(cfg.Algorithm, cfg.MaxChunks, cfg.MaxChunkBytes, cfg.MaxTotalBytes); err != nil {
		return nil, err
	}
	align, err := c.alignment()
	if err != nil {
		return nil, err
	}
	tempBytes, err := c.tempSize(cfg.MaxChunks, cfg.MaxChunkBytes, cfg.MaxTotalBytes)
	if err != nil {
		return nil, err
	}
	// LZ4 needs no temp space; a small buffer keeps the pointer non-NULL.
	temp, err := cuda.MemAlloc(max(tempBytes, 256))
	if err != nil {
		return nil, fmt.Errorf("nvcomp: %s decoder temp space of %d bytes: %w", cfg.Algorithm, tempBytes, err)
	}
	if align.Temp > 0 && uintptr(temp)%uintptr(align.Temp) != 0 {
		temp.Free()
		return nil, fmt.Errorf("nvcomp: %s decoder temp space at %v is not %d-byte aligned", cfg.Algorithm, temp, align.Temp)
	}
	return &Decoder{
		codec:     c,
		cfg:       cfg,
		align:     align,
		temp:      temp,
		tempBytes: tempBytes,
		call:      newDecompressCall(c, defaultOpts()),
	}, nil
}

// Config returns the decoder's configuration, with MaxTotalBytes filled in.
func (d *Decoder) Config() DecoderConfig { return d.cfg }

// Alignment returns the alignment that every compressed chunk, output
// buffer and the temp space must have (see Library.Alignment).
func (d *Decoder) Alignment() Alignment { return d.align }

// TempBytes returns the size of the decoder's temp space as nvCOMP asked
// for it.
func (d *Decoder) TempBytes() int { return d.tempBytes }

// Batch describes one batched decompression. Every array lives in device
// memory (cuMemAlloc or mapped pinned memory) and has N entries; pointer
// and size_t arrays must be 8-byte aligned, the statuses 4-byte aligned.
// nvCOMP reads the first four arrays and writes OutputSizes and Statuses,
// which stay on the device for the caller to check after the stream
// reaches this point (e.g. with a kernel that reduces them, or after a
// copy to the host, with CheckChunk): Decode never waits for the GPU.
type Batch struct {
	// N is the number of chunks, 1 to the decoder's MaxChunks.
	N int
	// CompressedPtrs holds N device pointers to the compressed chunks,
	// each aligned to Alignment().Input.
	CompressedPtrs cuda.DevicePtr
	// CompressedBytes holds N size_t: the size of each compressed chunk.
	CompressedBytes cuda.DevicePtr
	// OutputPtrs holds N device pointers to the output buffers, each
	// aligned to Alignment().Output.
	OutputPtrs cuda.DevicePtr
	// OutputCapacities holds N size_t: the size of each output buffer,
	// at most MaxChunkBytes. For zarr chunks it is the expected
	// decompressed size.
	OutputCapacities cuda.DevicePtr
	// TotalCapacity is the sum of the N capacities, as the caller wrote
	// them; it must not exceed MaxTotalBytes, which the temp space was
	// sized for. Decode checks it (it cannot read the device array).
	TotalCapacity int
	// OutputSizes receives N size_t: the bytes each chunk decompressed to.
	OutputSizes cuda.DevicePtr
	// Statuses receives N int32 Status values, StatusSuccess per chunk
	// that decoded.
	Statuses cuda.DevicePtr
}

// Decode enqueues the batched decompression of b on stream s and returns
// without waiting. An error means nothing usable was enqueued: a Batch that
// does not fit the decoder, or a launch that nvCOMP refused (*Error). A nil
// error says nothing about the chunks: read b.Statuses and b.OutputSizes
// once s has reached this point.
//
// The chunks must be of the decoder's algorithm and must have passed
// ZstdGPUReason or LZ4GPUCheck: nvCOMP trusts its input (see the package
// documentation), and those checks are what keep its writes inside each
// output buffer. Damage inside zstd blocks is invisible to a header scan,
// and on it nvCOMP may report success with wrong bytes or, rarely, never
// finish; wait for a Decode with a deadline (Event.Query), not an
// unbounded Synchronize, so that a hung GPU becomes an error.
func (d *Decoder) Decode(s cuda.Stream, b *Batch) error {
	if d.temp == 0 {
		return fmt.Errorf("nvcomp: %s decoder: Decode after Close", d.cfg.Algorithm)
	}
	if err := d.check(b); err != nil {
		return err
	}
	d.args = decompressArgs{
		inPtrs:        uintptr(b.CompressedPtrs),
		inBytes:       uintptr(b.CompressedBytes),
		outCapacities: uintptr(b.OutputCapacities),
		outSizes:      uintptr(b.OutputSizes),
		n:             uintptr(b.N),
		temp:          uintptr(d.temp),
		tempBytes:     uintptr(d.tempBytes),
		outPtrs:       uintptr(b.OutputPtrs),
		statuses:      uintptr(b.Statuses),
		stream:        uintptr(s),
	}
	if st := d.call.call(&d.args); st != StatusSuccess {
		return &Error{Op: d.codec.symbol("DecompressAsync"), Code: st}
	}
	return nil
}

func (d *Decoder) check(b *Batch) error {
	alg := d.cfg.Algorithm
	if b.N < 1 || b.N > d.cfg.MaxChunks {
		return fmt.Errorf("nvcomp: %s decoder: batch of %d chunks: must be 1 to %d", alg, b.N, d.cfg.MaxChunks)
	}
	if b.TotalCapacity < 0 || b.TotalCapacity > d.cfg.MaxTotalBytes {
		return fmt.Errorf("nvcomp: %s decoder: total output capacity %d: must be at most %d", alg, b.TotalCapacity, d.cfg.MaxTotalBytes)
	}
	for _, a := range [...]struct {
		name  string
		p     cuda.DevicePtr
		align uintptr
	}{
		{"CompressedPtrs", b.CompressedPtrs, 8},
		{"CompressedBytes", b.CompressedBytes, 8},
		{"OutputPtrs", b.OutputPtrs, 8},
		{"OutputCapacities", b.OutputCapacities, 8},
		{"OutputSizes", b.OutputSizes, 8},
		{"Statuses", b.Statuses, 4},
	} {
		if a.p == 0 || uintptr(a.p)%a.align != 0 {
			return fmt.Errorf("nvcomp: %s decoder: Batch.%s = %v: must be a non-null %d-byte aligned device address", alg, a.name, a.p, a.align)
		}
	}
	return nil
}

// Close frees the temp space. The caller must make sure that no Decode is
// still running on the GPU (synchronize its stream first). Close is safe
// to repeat.
func (d *Decoder) Close() error {
	if err := d.temp.Free(); err != nil {
		return fmt.Errorf("nvcomp: %s decoder: %w", d.cfg.Algorithm, err)
	}
	return nil
}

// ChunkError reports a chunk of a batch that did not decode to the size it
// should have: a non-success status, or a success whose decompressed size
// differs from the expected one (nvCOMP decodes only the first of several
// zstd frames, for one, and says success).
type ChunkError struct {
	Index  int    // position in the batch
	Status Status // the chunk's status
	Size   uint64 // bytes nvCOMP reports it wrote
	Want   int    // bytes the chunk must decode to
}

func (e *ChunkError) Error() string {
	if e.Status != StatusSuccess {
		return "nvcomp: chunk " + strconv.Itoa(e.Index) + ": " + e.Status.String()
	}
	return "nvcomp: chunk " + strconv.Itoa(e.Index) + ": decoded " + strconv.FormatUint(e.Size, 10) +
		" bytes, want " + strconv.Itoa(e.Want)
}

// Unwrap returns the chunk's status when it is not a success, else nil.
func (e *ChunkError) Unwrap() error {
	if e.Status != StatusSuccess {
		return e.Status
	}
	return nil
}

// CheckChunk returns nil if chunk i of a batch decoded, by its status and
// its size as read back from Batch.Statuses and Batch.OutputSizes, to
// exactly want bytes; otherwise a *ChunkError.
func CheckChunk(i int, status Status, size uint64, want int) error {
	if status == StatusSuccess && want >= 0 && size == uint64(want) {
		return nil
	}
	return &ChunkError{Index: i, Status: status, Size: size, Want: want}
}
