package nvcomp

import (
	"errors"
	"fmt"
	"strings"
	"structs"

	"github.com/ebitengine/purego"
)

// The C structs this package passes to nvCOMP. Each mirrors a typedef of the
// nvCOMP headers named in its comment; abi_test.go asserts sizes and offsets.

// properties mirrors nvcompProperties_t (nvcomp/shared_types.h, 4.x–6.x):
// 8 bytes, version @0, cudart_version @4.
type properties struct {
	_             structs.HostLayout
	version       uint32 // major*1000 + minor*100 + patch
	cudartVersion uint32 // CUDART_VERSION the library was built with
}

// alignmentRequirements mirrors nvcompAlignmentRequirements_t
// (nvcomp/shared_types.h, 4.1+): three size_t, 24 bytes.
type alignmentRequirements struct {
	_      structs.HostLayout
	input  uintptr
	output uintptr
	temp   uintptr
}

// decompressOpts mirrors nvcompBatchedZstdDecompressOpts_t and
// nvcompBatchedLZ4DecompressOpts_t (nvcomp/zstd.h, nvcomp/lz4.h, 5.x and 6.x):
// 64 bytes, passed by value, with the backend enum at offset 0. The LZ4
// struct's other fields (sort_before_hw_decompress @4, data_type @8,
// bitshuffle_mode @12) default to zero, which means "no bitshuffle", and are
// covered by the padding here.
type decompressOpts struct {
	_       structs.HostLayout
	backend int32
	_       [60]byte
}

// nvcompDecompressBackend_t values (nvcomp/shared_types.h, 5.0+).
const (
	backendDefault int32 = 0
	backendCUDA    int32 = 2
)

// defaultOpts are the options every call of this package passes. The backend
// is CUDA, not DEFAULT: on GPUs with a hardware decompression engine the
// DEFAULT backend may choose the engine, for which the 5.x/6.x headers say
// that corrupt LZ4 input is undefined behaviour with every status reported
// as success. The CUDA backend reports corrupt input per chunk.
func defaultOpts() decompressOpts { return decompressOpts{backend: backendCUDA} }

// Algorithm is a compression format that the Decoder decodes.
type Algorithm uint8

// Algorithms.
const (
	// Zstd is standard zstd frames (RFC 8878). See ZstdGPUReason for which
	// chunks nvCOMP decodes correctly.
	Zstd Algorithm = iota + 1
	// LZ4 is raw LZ4 blocks (no frame header, no size prefix), the format
	// of blosc LZ4 streams and of numcodecs' LZ4 after its 4-byte prefix.
	LZ4
)

// String returns "zstd" or "lz4".
func (a Algorithm) String() string {
	switch a {
	case Zstd:
		return "zstd"
	case LZ4:
		return "lz4"
	}
	return fmt.Sprintf("nvcomp.Algorithm(%d)", uint8(a))
}

// cname is the algorithm's infix in nvCOMP symbol names.
func (a Algorithm) cname() string {
	switch a {
	case Zstd:
		return "Zstd"
	case LZ4:
		return "LZ4"
	}
	return ""
}

// maxChunkBytes is the largest compressed or decompressed chunk that the
// algorithm's decompressor accepts (nvcompZstdDecompressionMaxAllowedChunkSize
// and nvcompLZ4DecompressionMaxAllowedChunkSize).
func (a Algorithm) maxChunkBytes() int64 {
	if a == LZ4 {
		return 1<<32 - 1
	}
	return 1<<31 - 1
}

// Alignment is the byte alignment that nvCOMP requires of each compressed
// input chunk, each output chunk and the temp buffer.
type Alignment struct {
	Input, Output, Temp int
}

// codec holds the entry points of one algorithm for the bound major version.
// The raw functions take C-shaped arguments; their wrappers in Library give
// every version the same Go shape.
type codec struct {
	alg Algorithm
	abi int // the nvCOMP major version whose signatures were bound

	// 5.x and 6.x: nvcompBatched<Alg>DecompressGetRequiredAlignments.
	getRequiredAlignments func(opts decompressOpts, out *alignmentRequirements) Status
	// 4.x: nvcompBatched<Alg>DecompressGetTempSizeEx.
	getTempSizeEx func(numChunks, maxChunkBytes uintptr, tempBytes *uintptr, maxTotalBytes uintptr) Status
	// 5.x: nvcompBatched<Alg>DecompressGetTempSizeAsync.
	getTempSizeAsync func(numChunks, maxChunkBytes uintptr, opts decompressOpts, tempBytes *uintptr, maxTotalBytes uintptr) Status
	// 6.x: nvcompBatched<Alg>DecompressGetTempSize, which added a stream.
	getTempSize func(numChunks, maxChunkBytes uintptr, opts decompressOpts, tempBytes *uintptr, maxTotalBytes uintptr, stream uintptr) Status

	// nvcompBatched<Alg>DecompressAsync: 10 arguments in 4.x, 11 with the
	// options struct (before the statuses) in 5.x and 6.x.
	decompressAsync uintptr
	// decompressAsyncOpts is decompressAsync through RegisterFunc, for the
	// 5.x/6.x signature on platforms where decompressCall cannot pass the
	// options struct through SyscallN.
	decompressAsyncOpts func(inPtrs, inBytes, outCapacities, outSizes, n, temp, tempBytes, outPtrs uintptr, opts decompressOpts, statuses, stream uintptr) Status
}

// symbol names the C function of this codec: symbol("DecompressAsync") is
// "nvcompBatchedZstdDecompressAsync".
func (c *codec) symbol(suffix string) string {
	return "nvcompBatched" + c.alg.cname() + suffix
}

// tempSizeOp is the C function that sizes temp space in the bound ABI.
func (c *codec) tempSizeOp() string {
	switch c.abi {
	case 4:
		return c.symbol("DecompressGetTempSizeEx")
	case 5:
		return c.symbol("DecompressGetTempSizeAsync")
	}
	return c.symbol("DecompressGetTempSize")
}

// binder resolves symbols of one library, collecting every missing name so
// that a library lacking several entry points is reported in one error.
type binder struct {
	handle  uintptr
	missing []string
	dlerr   error
}

func (b *binder) addr(name string) uintptr {
	a, err := purego.Dlsym(b.handle, name)
	if err != nil || a == 0 {
		b.missing = append(b.missing, name)
		if b.dlerr == nil {
			b.dlerr = err
		}
		return 0
	}
	return a
}

// fn binds the C function name to the Go function pointed to by fptr, or
// records the name as missing. RegisterFunc is only called with a non-zero
// address, so a missing symbol never panics.
func (b *binder) fn(fptr any, name string) {
	if a := b.addr(name); a != 0 {
		purego.RegisterFunc(fptr, a)
	}
}

func (b *binder) err() error {
	if len(b.missing) == 0 {
		return nil
	}
	msg := "nvcomp: library lacks " + strings.Join(b.missing, ", ")
	if b.dlerr != nil {
		return fmt.Errorf("%s: %w", msg, b.dlerr)
	}
	return errors.New(msg)
}

// bindCodec resolves the decompression entry points of alg for ABI major.
func (b *binder) bindCodec(alg Algorithm, major int) codec {
	c := codec{alg: alg, abi: major}
	switch major {
	case 4:
		b.fn(&c.getTempSizeEx, c.symbol("DecompressGetTempSizeEx"))
	case 5:
		b.fn(&c.getRequiredAlignments, c.symbol("DecompressGetRequiredAlignments"))
		b.fn(&c.getTempSizeAsync, c.symbol("DecompressGetTempSizeAsync"))
	case 6:
		b.fn(&c.getRequiredAlignments, c.symbol("DecompressGetRequiredAlignments"))
		b.fn(&c.getTempSize, c.symbol("DecompressGetTempSize"))
	}
	c.decompressAsync = b.addr(c.symbol("DecompressAsync"))
	if major >= 5 && c.decompressAsync != 0 && !syscallPassesOpts {
		purego.RegisterFunc(&c.decompressAsyncOpts, c.decompressAsync)
	}
	return c
}

// alignment returns the codec's alignment requirements: queried from the
// library on 5.x and 6.x, and on 4.x the most restrictive header constants
// of the 4.x series (nvcompZstdRequiredAlignment = 8 and
// nvcompLZ4RequiredAlignment = 4 of 4.0; 4.1 relaxed input and output to 1).
func (c *codec) alignment() (Alignment, error) {
	if c.abi == 4 {
		if c.alg == Zstd {
			return Alignment{8, 8, 8}, nil
		}
		return Alignment{4, 4, 4}, nil
	}
	var a alignmentRequirements
	if err := check(c.symbol("DecompressGetRequiredAlignments"), c.getRequiredAlignments(defaultOpts(), &a)); err != nil {
		return Alignment{}, err
	}
	return Alignment{Input: int(a.input), Output: int(a.output), Temp: int(a.temp)}, nil
}

// tempSize returns the temp bytes that decompressing up to numChunks chunks
// of at most maxChunkBytes each, maxTotalBytes in all, needs.
func (c *codec) tempSize(numChunks, maxChunkBytes, maxTotalBytes int) (int, error) {
	var t uintptr
	var s Status
	n, m, tot := uintptr(numChunks), uintptr(maxChunkBytes), uintptr(maxTotalBytes)
	switch c.abi {
	case 4:
		s = c.getTempSizeEx(n, m, &t, tot)
	case 5:
		s = c.getTempSizeAsync(n, m, defaultOpts(), &t, tot)
	default:
		// The 6.x header says this call enqueues no work on the stream;
		// the legacy default stream is passed.
		s = c.getTempSize(n, m, defaultOpts(), &t, tot, 0)
	}
	if err := check(c.tempSizeOp(), s); err != nil {
		return 0, err
	}
	return int(t), nil
}
