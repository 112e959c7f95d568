package blosc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// A Decoder decodes blosc1 chunks. It keeps a zstd decoder, zlib readers and
// scratch blocks between calls, so that once warm it decodes without
// allocating, except for zlib streams, whose inflater builds Huffman tables
// per block. It is safe for concurrent use.
type Decoder struct {
	zstd    *zstd.Decoder
	scratch sync.Pool // *[]byte, one block of shuffled bytes
	zlib    sync.Pool // *zlibReader
}

type zlibReader struct {
	src bytes.Reader
	r   io.ReadCloser // nil until the first stream
}

// NewDecoder returns a Decoder whose zstd decoder runs up to GOMAXPROCS
// streams at once.
func NewDecoder() (*Decoder, error) {
	// Every stream decodes into a slice of exactly its expected length, so
	// capping zstd output at the slice's capacity bounds memory whatever a
	// frame header claims.
	zd, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("blosc: zstd decoder: %w", err)
	}
	return &Decoder{zstd: zd}, nil
}

// Close releases the zstd decoder. The Decoder must not be used afterwards.
func (d *Decoder) Close() { d.zstd.Close() }

// shared is the Decoder behind the package-level Decode functions, built on
// first use.
var shared = sync.OnceValues(NewDecoder)

// Decode decodes the chunk src into dst with a Decoder shared by the
// package. See (*Decoder).Decode.
func Decode(dst, src []byte) (int, error) {
	d, err := shared()
	if err != nil {
		return 0, err
	}
	return d.Decode(dst, src)
}

// DecodeNoUnshuffle decodes the chunk src into dst without undoing its
// shuffle, with a Decoder shared by the package. See
// (*Decoder).DecodeNoUnshuffle.
func DecodeNoUnshuffle(dst, src []byte) (int, error) {
	d, err := shared()
	if err != nil {
		return 0, err
	}
	return d.DecodeNoUnshuffle(dst, src)
}

// Decode decodes the chunk src into dst[:n] and returns n, the chunk's
// Nbytes; dst must hold at least that many bytes. Bytes of src past the
// header's Cbytes are ignored. Every stream must decode to exactly its
// expected length, and split blocks must divide evenly among their streams.
// On error, dst may have been partly written.
func (d *Decoder) Decode(dst, src []byte) (int, error) {
	return d.decode(dst, src, true)
}

// DecodeNoUnshuffle is like Decode but leaves each block as the codec
// produced it, still byte- or bit-shuffled as Header.Shuffle says, for a
// caller that unshuffles later (see Unshuffle and BitUnshuffle).
func (d *Decoder) DecodeNoUnshuffle(dst, src []byte) (int, error) {
	return d.decode(dst, src, false)
}

// DecodeBlocks decodes blocks [from, to) of the chunk src (see
// Header.Blocks), unshuffled as Decode does, into their place in dst, which
// holds the whole chunk (at least its Nbytes bytes); it writes only those
// blocks' bytes. Blocks are independent: goroutines may decode disjoint
// ranges of one chunk into one dst at once, and together the ranges
// [0, Blocks()) write what Decode does. Only the streams of the range are
// checked; on error, dst may have been partly written.
func (d *Decoder) DecodeBlocks(dst, src []byte, from, to int) error {
	return d.blockRange(dst, src, from, to, true)
}

// DecodeBlocksNoUnshuffle is like DecodeBlocks but leaves the blocks as
// DecodeNoUnshuffle does: together the ranges [0, Blocks()) write what
// DecodeNoUnshuffle does.
func (d *Decoder) DecodeBlocksNoUnshuffle(dst, src []byte, from, to int) error {
	return d.blockRange(dst, src, from, to, false)
}

// blockRange checks the range [from, to) of the chunk src and decodes its
// blocks into dst, unshuffled when unshuffle is set.
func (d *Decoder) blockRange(dst, src []byte, from, to int, unshuffle bool) error {
	h, err := ParseHeader(src)
	if err != nil {
		return err
	}
	if from < 0 || from > to || to > h.Blocks() {
		return fmt.Errorf("blosc: blocks [%d, %d) of a chunk of %d", from, to, h.Blocks())
	}
	_, err = d.decodeBlocks(dst, src, h, from, to, unshuffle)
	return err
}

// DecodeBlocks decodes blocks [from, to) of the chunk src into dst with a
// Decoder shared by the package. See (*Decoder).DecodeBlocks.
func DecodeBlocks(dst, src []byte, from, to int) error {
	d, err := shared()
	if err != nil {
		return err
	}
	return d.DecodeBlocks(dst, src, from, to)
}

// DecodeBlocksNoUnshuffle decodes blocks [from, to) of the chunk src into
// dst, leaving their shuffle, with a Decoder shared by the package. See
// (*Decoder).DecodeBlocksNoUnshuffle.
func DecodeBlocksNoUnshuffle(dst, src []byte, from, to int) error {
	d, err := shared()
	if err != nil {
		return err
	}
	return d.DecodeBlocksNoUnshuffle(dst, src, from, to)
}

func (d *Decoder) decode(dst, src []byte, unshuffle bool) (int, error) {
	h, err := ParseHeader(src)
	if err != nil {
		return 0, err
	}
	return d.decodeBlocks(dst, src, h, 0, h.Blocks(), unshuffle)
}

// decodeBlocks decodes blocks [from, to) of the chunk src of header h into
// dst, unshuffled when unshuffle is set, and returns h.Nbytes.
func (d *Decoder) decodeBlocks(dst, src []byte, h Header, from, to int, unshuffle bool) (int, error) {
	if len(dst) < h.Nbytes {
		return 0, fmt.Errorf("blosc: destination holds %d bytes, chunk decodes to %d: %w", len(dst), h.Nbytes, io.ErrShortBuffer)
	}
	src, dst = src[:h.Cbytes], dst[:h.Nbytes]
	shuffle := h.Shuffle()
	var err error
	if !unshuffle || shuffle == NoShuffle {
		err = walk(src, h, from, to, func(s Stream) error {
			return d.stream(dst[s.Dst:s.Dst+s.Size], src[s.Src:s.Src+s.CSize], h, s)
		})
		if err != nil {
			return 0, err
		}
		return h.Nbytes, nil
	}
	// Decode each block into scratch and unshuffle it into place; a bit
	// shuffled block is decoded in place and unshuffled through scratch.
	bp := d.block(h.Blocksize)
	defer d.scratch.Put(bp)
	tmp := *bp
	err = walk(src, h, from, to, func(s Stream) error {
		start := s.Block * h.Blocksize
		out := tmp[s.Dst-start : s.Dst-start+s.Size]
		if shuffle == BitShuffle {
			out = dst[s.Dst : s.Dst+s.Size]
		}
		if err := d.stream(out, src[s.Src:s.Src+s.CSize], h, s); err != nil {
			return err
		}
		end := min(start+h.Blocksize, h.Nbytes)
		if s.Dst+s.Size < end {
			return nil // more streams in this block
		}
		if shuffle == ByteShuffle {
			unshuffleBlock(dst[start:end], tmp[:end-start], h.Typesize)
		} else {
			bitUnshuffleBlock(dst[start:end], dst[start:end], tmp, h.Typesize)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return h.Nbytes, nil
}

// block returns a scratch buffer of n bytes.
func (d *Decoder) block(n int) *[]byte {
	if bp, ok := d.scratch.Get().(*[]byte); ok && cap(*bp) >= n {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n)
	return &b
}

// stream decodes one stream in into out, which has exactly the stream's
// decoded length.
func (d *Decoder) stream(out, in []byte, h Header, s Stream) error {
	if s.Raw {
		copy(out, in)
		return nil
	}
	switch h.Compressor() {
	case BloscLZ:
		if err := decodeBloscLZ(out, in); err != nil {
			return streamError(h, s, "is invalid", err)
		}
	case LZ4:
		n, err := lz4.UncompressBlock(in, out)
		if err != nil {
			return streamError(h, s, "is invalid", err)
		}
		if n != len(out) {
			return streamError(h, s, fmt.Sprintf("decoded to %d bytes, want %d", n, len(out)), nil)
		}
	case Snappy:
		n, err := snappy.DecodedLen(in)
		if err != nil {
			return streamError(h, s, "is invalid", err)
		}
		if n != len(out) {
			return streamError(h, s, fmt.Sprintf("declares %d bytes, want %d", n, len(out)), nil)
		}
		if _, err := snappy.DecodeStrict(out[:0:len(out)], in); err != nil {
			return streamError(h, s, "is invalid", err)
		}
	case Zlib:
		return d.inflate(out, in, h, s)
	case Zstd:
		got, err := d.zstd.DecodeAll(in, out[:0:len(out)])
		if err != nil {
			return streamError(h, s, "is invalid", err)
		}
		if len(got) != len(out) {
			return streamError(h, s, fmt.Sprintf("decoded to %d bytes, want %d", len(got), len(out)), nil)
		}
	}
	return nil
}

func streamError(h Header, s Stream, msg string, err error) error {
	return &FormatError{Field: streamField(h, s), Offset: s.Src - 4, Msg: h.Compressor().String() + " stream " + msg, Kind: ErrCorrupt, Err: err}
}

// inflate decodes the zlib stream in into out, requiring the stream to end,
// checksum verified, exactly at len(out).
func (d *Decoder) inflate(out, in []byte, h Header, s Stream) error {
	zr, _ := d.zlib.Get().(*zlibReader)
	if zr == nil {
		zr = new(zlibReader)
	}
	defer d.zlib.Put(zr)
	zr.src.Reset(in)
	var err error
	if zr.r == nil {
		zr.r, err = zlib.NewReader(&zr.src)
	} else {
		err = zr.r.(zlib.Resetter).Reset(&zr.src, nil)
	}
	if err != nil {
		return streamError(h, s, "is invalid", err)
	}
	if n, err := io.ReadFull(zr.r, out); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return streamError(h, s, fmt.Sprintf("decoded to %d bytes, want %d", n, len(out)), nil)
		}
		return streamError(h, s, "is invalid", err)
	}
	// Reading on to the end verifies the adler32 and that nothing follows.
	var one [1]byte
	switch _, err := io.ReadFull(zr.r, one[:]); err {
	case io.EOF:
		return nil
	case nil:
		return streamError(h, s, fmt.Sprintf("decodes to more than %d bytes", len(out)), nil)
	default:
		return streamError(h, s, "is invalid", err)
	}
}
