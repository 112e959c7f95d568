// Package blosc reads and writes blosc1 chunks, the c-blosc 1.x format that
// the zarr "blosc" codec (v3) and the numcodecs Blosc compressor (v2) store.
//
// A chunk is a 16-byte header, a table of block starts, and blocks made of
// length-prefixed streams, each compressed with one of blosclz, lz4/lz4hc,
// snappy, zlib or zstd, after an optional byte or bit shuffle of each block.
//
// Decode undoes all of it on the CPU; DecodeNoUnshuffle stops before the
// unshuffle, which Unshuffle and BitUnshuffle do separately. Both use a
// Decoder the package builds on first use; NewDecoder makes one to own.
// Parse lists where every stream lies, without decompressing anything, so
// that a GPU path can hand lz4 and zstd streams to nvCOMP and unshuffle
// while it gathers. Encode (or an Encoder) writes chunks that c-blosc reads,
// with the block sizes and split rule c-blosc 1.21 uses.
//
// Everything read from a chunk is checked against the chunk's length and the
// format's limits before it sizes an allocation or an index. The decoder
// accepts what c-blosc 1.21 (as numcodecs 0.16 ships it) accepts, with these
// differences: a chunk's cbytes may not exceed the bytes given; block starts
// must point past the block-start table; a split block must divide evenly
// among its streams; and a blosclz stream may end with a match, which
// c-blosc 1.21's decoder rejects and older ones decoded (no c-blosc encoder
// writes one).
package blosc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Format limits of c-blosc 1.x.
const (
	// HeaderSize is the length of a blosc1 header.
	HeaderSize = 16
	// MaxBufferSize is the largest uncompressed chunk c-blosc 1.x handles
	// (BLOSC_MAX_BUFFERSIZE: INT_MAX minus the header).
	MaxBufferSize = 1<<31 - 1 - HeaderSize
	// MaxBlocksize is the largest block c-blosc 1.x accepts
	// (BLOSC_MAX_BLOCKSIZE: (INT_MAX - 255*4) / 3).
	MaxBlocksize = (1<<31 - 1 - 255*4) / 3
	// MaxTypesize is the largest element size a header can carry.
	MaxTypesize = 255

	formatVersion = 2 // BLOSC_VERSION_FORMAT
	codecVersion  = 1 // the per-codec format version of every codec

	flagShuffle    = 0x01
	flagMemcpyed   = 0x02
	flagBitShuffle = 0x04
	flagReserved   = 0x08
	flagDontSplit  = 0x10

	maxSplits     = 16  // MAX_SPLITS
	minBufferSize = 128 // MIN_BUFFERSIZE
)

// Errors. Every error returned for a malformed chunk is a *FormatError that
// matches ErrCorrupt or ErrUnsupported under errors.Is.
var (
	// ErrCorrupt reports a chunk that breaks the blosc1 format: a field out of
	// range, a size that does not add up, a stream that fails to decode or
	// decodes to the wrong length.
	ErrCorrupt = errors.New("blosc: corrupt chunk")
	// ErrUnsupported reports a well-formed header this package does not read:
	// a format version other than 2 (blosc2 frames among them), an unknown
	// codec, or a codec format version other than 1.
	ErrUnsupported = errors.New("blosc: unsupported chunk")
)

// A FormatError says which part of a chunk is wrong.
type FormatError struct {
	// Field names the part at fault: a header field ("version", "flags",
	// "typesize", "nbytes", "blocksize", "cbytes"), a block start
	// ("bstarts[3]"), a stream ("block 3 stream 1"), or "dst" when the
	// destination is too small.
	Field string
	// Offset is the byte offset in the chunk where the part begins.
	Offset int
	// Msg says what is wrong with it.
	Msg string
	// Kind is ErrCorrupt or ErrUnsupported.
	Kind error
	// Err is the codec's own error, if any.
	Err error
}

// Error returns "blosc: FIELD at offset N: MSG", then the codec's error.
func (e *FormatError) Error() string {
	s := fmt.Sprintf("blosc: %s at offset %d: %s", e.Field, e.Offset, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Kind and, when present, the codec's error.
func (e *FormatError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func corrupt(field string, off int, format string, args ...any) error {
	return &FormatError{Field: field, Offset: off, Msg: fmt.Sprintf(format, args...), Kind: ErrCorrupt}
}

func unsupported(field string, off int, format string, args ...any) error {
	return &FormatError{Field: field, Offset: off, Msg: fmt.Sprintf(format, args...), Kind: ErrUnsupported}
}

// Compressor names a blosc codec. The values are c-blosc's API codes; LZ4 and
// LZ4HC write the same stream format, so a header reports LZ4 for both.
type Compressor uint8

// Compressors.
const (
	BloscLZ Compressor = iota // blosc's own LZ77 variant
	LZ4                       // LZ4 blocks
	LZ4HC                     // LZ4 blocks from the high-compression encoder
	Snappy                    // raw snappy blocks
	Zlib                      // zlib streams (RFC 1950)
	Zstd                      // one zstd frame per stream
)

var compressorNames = [...]string{"blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"}

// String returns the codec's cname as zarr and numcodecs spell it.
func (c Compressor) String() string {
	if int(c) < len(compressorNames) {
		return compressorNames[c]
	}
	return fmt.Sprintf("Compressor(%d)", uint8(c))
}

// ParseCompressor returns the Compressor for a cname ("blosclz", "lz4",
// "lz4hc", "snappy", "zlib", "zstd").
func ParseCompressor(cname string) (Compressor, error) {
	for i, n := range compressorNames {
		if n == cname {
			return Compressor(i), nil
		}
	}
	return 0, fmt.Errorf("blosc: unknown cname %q: %w", cname, ErrUnsupported)
}

// compcode maps a header's codec format code (flags bits 5-7) to a Compressor.
var compcodes = [...]Compressor{0: BloscLZ, 1: LZ4, 2: Snappy, 3: Zlib, 4: Zstd}

// formatCode is the header code of c's stream format.
func (c Compressor) formatCode() uint8 {
	switch c {
	case LZ4, LZ4HC:
		return 1
	case Snappy:
		return 2
	case Zlib:
		return 3
	case Zstd:
		return 4
	}
	return 0
}

// Shuffle names the filter applied to each block before compression. The
// values are the codes zarr and numcodecs use.
type Shuffle uint8

// Shuffles.
const (
	NoShuffle   Shuffle = 0
	ByteShuffle Shuffle = 1
	BitShuffle  Shuffle = 2
)

// String returns the filter's name as zarr v3 spells it ("noshuffle",
// "shuffle", "bitshuffle").
func (s Shuffle) String() string {
	switch s {
	case NoShuffle:
		return "noshuffle"
	case ByteShuffle:
		return "shuffle"
	case BitShuffle:
		return "bitshuffle"
	}
	return fmt.Sprintf("Shuffle(%d)", uint8(s))
}

// Header is a parsed blosc1 header.
type Header struct {
	Version   uint8 // format version; always 2 once parsed
	VersionLZ uint8 // the codec's format version
	Flags     uint8 // shuffle, memcpyed, bitshuffle, dont-split and codec bits
	Typesize  int   // element size in bytes, 1..255
	Nbytes    int   // uncompressed size
	Blocksize int   // uncompressed size of every block but a shorter last one
	Cbytes    int   // chunk size including the header
}

// ParseHeader reads and validates the header at the start of src: it checks
// every field against the format's limits and against len(src), so that the
// block table fits in src[:Cbytes] as far as the header alone can tell. A
// format version other than 2, or (in a chunk that is not memcpyed) an
// unknown codec or codec version, is ErrUnsupported; anything else wrong is
// ErrCorrupt.
func ParseHeader(src []byte) (Header, error) {
	if len(src) < HeaderSize {
		return Header{}, corrupt("header", 0, "chunk is %d bytes, shorter than the %d-byte header", len(src), HeaderSize)
	}
	if src[0] != formatVersion {
		return Header{}, unsupported("version", 0, "format version %d, want %d", src[0], formatVersion)
	}
	nbytes := binary.LittleEndian.Uint32(src[4:])
	blocksize := binary.LittleEndian.Uint32(src[8:])
	cbytes := binary.LittleEndian.Uint32(src[12:])
	// Range-check the 32-bit fields before they become ints, which may be
	// 32 bits wide.
	if nbytes > MaxBufferSize {
		return Header{}, corrupt("nbytes", 4, "nbytes %d exceeds the blosc1 limit %d", nbytes, MaxBufferSize)
	}
	if blocksize == 0 || blocksize > MaxBlocksize {
		return Header{}, corrupt("blocksize", 8, "blocksize %d outside 1..%d", blocksize, MaxBlocksize)
	}
	if cbytes < HeaderSize || uint64(cbytes) > uint64(len(src)) {
		return Header{}, corrupt("cbytes", 12, "cbytes %d outside %d..%d (the chunk's length)", cbytes, HeaderSize, len(src))
	}
	h := Header{
		Version:   src[0],
		VersionLZ: src[1],
		Flags:     src[2],
		Typesize:  int(src[3]),
		Nbytes:    int(nbytes),
		Blocksize: int(blocksize),
		Cbytes:    int(cbytes),
	}
	if h.Flags&flagReserved != 0 {
		return Header{}, corrupt("flags", 2, "reserved bit 0x08 set in flags %#02x", h.Flags)
	}
	if h.Typesize == 0 {
		return Header{}, corrupt("typesize", 3, "typesize 0")
	}
	if h.Nbytes > 0 && h.Blocksize > h.Nbytes {
		return Header{}, corrupt("blocksize", 8, "blocksize %d exceeds nbytes %d", h.Blocksize, h.Nbytes)
	}
	if h.Memcpyed() {
		if h.Cbytes != h.Nbytes+HeaderSize {
			return Header{}, corrupt("cbytes", 12, "memcpyed chunk has cbytes %d, want nbytes+%d = %d", h.Cbytes, HeaderSize, h.Nbytes+HeaderSize)
		}
		return h, nil
	}
	if cc := h.Flags >> 5; int(cc) >= len(compcodes) {
		return Header{}, unsupported("flags", 2, "codec format code %d in flags %#02x", cc, h.Flags)
	}
	if h.VersionLZ != codecVersion {
		return Header{}, unsupported("versionlz", 1, "%s format version %d, want %d", h.Compressor(), h.VersionLZ, codecVersion)
	}
	// Every block has a 4-byte start and at least one 4-byte stream prefix.
	if nb := h.nblocks(); nb > (h.Cbytes-HeaderSize)/8 {
		return Header{}, corrupt("cbytes", 12, "cbytes %d too small for %d blocks", h.Cbytes, nb)
	}
	return h, nil
}

// Compressor returns the codec of the chunk's streams (LZ4 for lz4hc too).
// A memcpyed chunk may carry a code no codec has; Compressor then returns
// Compressor(255).
func (h Header) Compressor() Compressor {
	cc := h.Flags >> 5
	if int(cc) < len(compcodes) {
		return compcodes[cc]
	}
	return Compressor(0xff)
}

// Shuffle returns the filter Decode undoes on each block: ByteShuffle when
// the shuffle flag is set and Typesize > 1, else BitShuffle when the
// bitshuffle flag is set, else NoShuffle. Memcpyed chunks are never
// shuffled, whatever their flags say.
func (h Header) Shuffle() Shuffle {
	switch {
	case h.Memcpyed():
		return NoShuffle
	case h.Flags&flagShuffle != 0 && h.Typesize > 1:
		return ByteShuffle
	case h.Flags&flagBitShuffle != 0:
		return BitShuffle
	}
	return NoShuffle
}

// Memcpyed reports whether the chunk stores its Nbytes raw after the header.
func (h Header) Memcpyed() bool { return h.Flags&flagMemcpyed != 0 }

// DontSplit reports whether the dont-split flag is set. Blocks are split into
// Typesize streams only when it is clear, Typesize <= 16, Blocksize/Typesize
// >= 128, and the block is not a shorter last block.
func (h Header) DontSplit() bool { return h.Flags&flagDontSplit != 0 }

// Blocks returns the number of units DecodeBlocks takes: the chunk's
// blocks, a shorter last one included; 1 for a memcpyed chunk (its data is
// one raw stream) that is not empty.
func (h Header) Blocks() int {
	if h.Memcpyed() {
		return min(h.Nbytes, 1)
	}
	return h.nblocks()
}

// nblocks is the number of blocks, a shorter last one included.
func (h Header) nblocks() int {
	return (h.Nbytes + h.Blocksize - 1) / h.Blocksize
}

// nsplits is the number of streams of a block of bsize bytes.
func (h Header) nsplits(bsize int) int {
	if !h.DontSplit() && h.Typesize <= maxSplits && h.Blocksize/h.Typesize >= minBufferSize && bsize == h.Blocksize {
		return h.Typesize
	}
	return 1
}
