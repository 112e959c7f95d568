package writer

import (
	"fmt"
	"math"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
)

// Spec describes an array to write. The zero value of each optional field
// means the default named in its comment.
type Spec struct {
	// Format is the zarr format, 3 (the default when zero) or 2.
	Format int
	// Shape is the array's shape: 1 to 32 dimensions, each at least 1.
	Shape []int64
	// ChunkShape is the shape of a chunk: the inner chunk of a sharded
	// array, the chunk of an unsharded one. At most 1 GiB per chunk.
	ChunkShape []int64
	// ShardShape is the shape of a shard, a multiple of ChunkShape in every
	// dimension; nil means unsharded. Format 3 only.
	ShardShape []int64
	// IndexAtStart puts each shard's index before its chunks instead of
	// after them (index_location "start"). Sharded arrays only.
	IndexAtStart bool
	// DataType is the element type.
	DataType zarr.DataType
	// BigEndian stores elements big-endian. It changes only the stored
	// bytes: data passed to the writer is always little-endian.
	BigEndian bool
	// Order is the memory order inside each stored chunk, 'C' (the default
	// when zero) or 'F'. Format 3 writes 'F' as a transpose codec that
	// reverses the axes; format 2 writes it as the .zarray order.
	Order byte
	// Compression is the chunks' compressor; the zero value stores them
	// uncompressed.
	Compression Compression
	// Fill is the fill value: what missing chunks read as, and what pads
	// edge chunks. The zero value is 0 (false for bool).
	Fill Fill
	// SkipEmptyChunks leaves out chunks whose every element has the fill
	// value's bit pattern (zarr-python's write_empty_chunks=false), and
	// shards whose chunks are all left out. Readers see them as fill.
	SkipEmptyChunks bool
	// V2Keys selects the v2 chunk key encoding ("1.2.3") for a format 3
	// array instead of the default one ("c/1/2/3"). Format 3 only; format 2
	// always uses v2 keys.
	V2Keys bool
	// Separator is the chunk key separator, "/" or ".". Empty means the
	// encoding's default: "/" for the default encoding, "." for v2 keys.
	Separator string
	// DimensionNames names the dimensions (dimension_names); nil writes
	// none. Format 3 only.
	DimensionNames []string
	// Attributes are the array's user attributes, marshalled with
	// encoding/json into zarr.json's "attributes" (format 3) or .zattrs
	// (format 2). Nil writes none.
	Attributes map[string]any
}

// Codec is a chunk compressor.
type Codec uint8

// The compressors the writer can use.
const (
	// NoCompression stores chunks as raw bytes.
	NoCompression Codec = iota
	// Zstd is zstd (one frame per chunk, with its content size).
	Zstd
	// Blosc is a blosc1 chunk.
	Blosc
	// Gzip is a gzip (RFC 1952) stream.
	Gzip
	// Zlib is a zlib (RFC 1950) stream. Format 2 only.
	Zlib
	// LZ4 is numcodecs' LZ4: a 4-byte little-endian size, then one LZ4
	// block. Format 2 "lz4"; format 3 "numcodecs.lz4".
	LZ4
)

var codecNames = [...]string{
	NoCompression: "none",
	Zstd:          "zstd",
	Blosc:         "blosc",
	Gzip:          "gzip",
	Zlib:          "zlib",
	LZ4:           "lz4",
}

// String returns the codec's lowercase name ("zstd"), or "Codec(N)".
func (c Codec) String() string {
	if int(c) < len(codecNames) {
		return codecNames[c]
	}
	return fmt.Sprintf("Codec(%d)", uint8(c))
}

// Compression configures the chunk compressor. Fields that do not apply to
// the chosen Codec must be zero.
type Compression struct {
	// Codec is the compressor.
	Codec Codec
	// Level is the codec's level as written in the metadata: zstd
	// -131072..22 (0 = zstd's default, 3); gzip and zlib 0..9; blosc clevel
	// 0..9; LZ4 the acceleration, at least 1 (0 = 1). The zstd encoder used
	// has four speeds, so nearby zstd levels give the same bytes.
	Level int
	// Checksum stores zstd's content checksum. Zstd only.
	Checksum bool
	// BloscCompressor is blosc's inner compressor: blosc.LZ4, blosc.LZ4HC,
	// blosc.Zstd, blosc.Zlib or blosc.BloscLZ (the zero value); not
	// blosc.Snappy, which zarr-python cannot read. Blosc only.
	BloscCompressor blosc.Compressor
	// Shuffle is blosc's filter: blosc.NoShuffle, blosc.ByteShuffle or
	// blosc.BitShuffle. Blosc only.
	Shuffle blosc.Shuffle
	// Blocksize is blosc's block size in bytes; 0 lets the encoder choose
	// (and writes blocksize 0). Blosc only.
	Blocksize int
}

// Fill is a fill value. Make one with FillInt, FillUint, FillFloat or
// FillBits; the zero Fill is zero (false for bool).
type Fill struct {
	kind fillKind
	u    uint64 // FillUint's value, FillInt's as two's complement, FillBits' pattern
	f    float64
}

type fillKind uint8

const (
	fillInt fillKind = iota
	fillUint
	fillFloat
	fillBits
)

// FillInt is the integer v. It must be in the data type's range; for bool
// it must be 0 or 1, for a float type exactly representable.
func FillInt(v int64) Fill { return Fill{kind: fillInt, u: uint64(v)} }

// FillUint is the unsigned integer v, under the same rules as FillInt.
func FillUint(v uint64) Fill { return Fill{kind: fillUint, u: v} }

// FillFloat is the number v. A float type rounds it to nearest (NaN and
// infinities included; NaN becomes the canonical quiet NaN); an integer
// type requires an integer in range.
func FillFloat(v float64) Fill { return Fill{kind: fillFloat, f: v} }

// FillBits is the element whose little-endian bit pattern is bits, e.g.
// math.Float32bits(x) or a NaN with a payload (0x7fc00001). It must fit in
// the data type's size; a bool must be 0 or 1.
func FillBits(bits uint64) Fill { return Fill{kind: fillBits, u: bits} }

// pattern resolves f to the bit pattern of one element of ti, or explains
// why it cannot.
func (f Fill) pattern(ti typeInfo) (uint64, string) {
	switch f.kind {
	case fillBits:
		if f.u&^ti.mask() != 0 || ti.kind == kindBool && f.u > 1 {
			return 0, fmt.Sprintf("bit pattern %#x does not fit the data type", f.u)
		}
		return f.u, ""
	case fillFloat:
		if ti.kind == kindFloat {
			if math.IsNaN(f.f) {
				return ti.canonicalNaN(), ""
			}
			return ti.fromFloat64(f.f), ""
		}
		if f.f != math.Trunc(f.f) || math.IsInf(f.f, 0) {
			return 0, fmt.Sprintf("%v is not an integer", f.f)
		}
		if f.f < 0 {
			if f.f < -(1 << 63) {
				return 0, fmt.Sprintf("%v is out of range", f.f)
			}
			return intPattern(ti, int64(f.f))
		}
		if f.f >= 1<<64 {
			return 0, fmt.Sprintf("%v is out of range", f.f)
		}
		return uintPattern(ti, uint64(f.f))
	case fillUint:
		return uintPattern(ti, f.u)
	}
	return intPattern(ti, int64(f.u))
}

func intPattern(ti typeInfo, v int64) (uint64, string) {
	if v >= 0 {
		return uintPattern(ti, uint64(v))
	}
	switch ti.kind {
	case kindInt:
		if v < ti.minInt() {
			return 0, fmt.Sprintf("%d is out of range", v)
		}
		return uint64(v) & ti.mask(), ""
	case kindFloat:
		f := float64(v)
		return floatPattern(ti, f, int64(f) == v, fmt.Sprint(v))
	}
	return 0, fmt.Sprintf("%d is out of range", v)
}

func uintPattern(ti typeInfo, v uint64) (uint64, string) {
	switch ti.kind {
	case kindBool:
		if v > 1 {
			return 0, fmt.Sprintf("%d is not 0 or 1", v)
		}
	case kindInt:
		if v > uint64(ti.maxInt()) {
			return 0, fmt.Sprintf("%d is out of range", v)
		}
	case kindUint:
		if v > ti.maxUint() {
			return 0, fmt.Sprintf("%d is out of range", v)
		}
	case kindFloat:
		f := float64(v)
		return floatPattern(ti, f, f < 1<<64 && uint64(f) == v, fmt.Sprint(v))
	}
	return v, ""
}

// floatPattern converts an integer fill value, f as float64, to a float
// type, requiring every conversion to be exact; exact says whether the one
// to float64 was.
func floatPattern(ti typeInfo, f float64, exact bool, text string) (uint64, string) {
	p := ti.fromFloat64(f)
	if !exact || ti.toFloat64(p) != f {
		return 0, text + " is not exactly representable"
	}
	return p, ""
}
