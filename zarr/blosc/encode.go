package blosc

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Options configure Encode. The zero value stores the data uncompressed
// (blosclz at level 0).
type Options struct {
	// Compressor is the codec of the streams.
	Compressor Compressor
	// Level is blosc's clevel, 0..9. 0 stores the data raw (a memcpyed
	// chunk). Codecs map it as c-blosc does: zstd uses level 2*Level-1
	// (22 for 9) through klauspost's nearest encoder level, lz4hc its
	// Level-th depth, zlib the same level; lz4, snappy and blosclz ignore it.
	Level int
	// Shuffle is the filter applied to each block before compression.
	Shuffle Shuffle
	// Typesize is the element size in bytes, 1..255; 0 means 1.
	Typesize int
	// Blocksize is the requested block size; 0 picks one as c-blosc 1.21's
	// compute_blocksize does. Like c-blosc, a requested size is raised to
	// at least 128 bytes, enlarged for codecs that split blocks, cut to the
	// data's length and rounded down to a multiple of Typesize.
	Blocksize int
}

// An Encoder writes blosc1 chunks with fixed Options, keeping codec state
// between calls. It is not safe for concurrent use.
type Encoder struct {
	o        Options
	zstd     *zstd.Encoder
	lz4      lz4.Compressor
	lz4hc    lz4.CompressorHC
	zlib     *zlib.Writer
	zbuf     bytes.Buffer
	blosclz  *[1 << blosclzTableBits]int32
	shuffled []byte // one block after its shuffle
	codecBuf []byte // one stream's codec output
}

// NewEncoder validates o and returns an Encoder for it.
func NewEncoder(o Options) (*Encoder, error) {
	if o.Typesize == 0 {
		o.Typesize = 1
	}
	switch {
	case o.Compressor > Zstd:
		return nil, fmt.Errorf("blosc: unknown compressor %d: %w", o.Compressor, ErrUnsupported)
	case o.Level < 0 || o.Level > 9:
		return nil, fmt.Errorf("blosc: level %d outside 0..9", o.Level)
	case o.Shuffle > BitShuffle:
		return nil, fmt.Errorf("blosc: unknown shuffle %d: %w", o.Shuffle, ErrUnsupported)
	case o.Typesize < 1 || o.Typesize > MaxTypesize:
		return nil, fmt.Errorf("blosc: typesize %d outside 1..%d", o.Typesize, MaxTypesize)
	case o.Blocksize < 0:
		return nil, fmt.Errorf("blosc: blocksize %d < 0", o.Blocksize)
	}
	e := &Encoder{o: o}
	switch o.Compressor {
	case Zstd:
		level := 2*o.Level - 1
		if o.Level == 9 {
			level = 22
		}
		// c-blosc's ZSTD_compress writes the content size and no checksum.
		zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(max(level, 1))),
			zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
		if err != nil {
			return nil, fmt.Errorf("blosc: zstd encoder: %w", err)
		}
		e.zstd = zw
	case LZ4HC:
		e.lz4hc.Level = lz4.CompressionLevel(1 << (8 + max(o.Level, 1)))
	case Zlib:
		zw, err := zlib.NewWriterLevel(&e.zbuf, o.Level)
		if err != nil {
			return nil, fmt.Errorf("blosc: zlib encoder: %w", err)
		}
		e.zlib = zw
	case BloscLZ:
		e.blosclz = new([1 << blosclzTableBits]int32)
	}
	return e, nil
}

// Close releases the Encoder's codec state.
func (e *Encoder) Close() {
	if e.zstd != nil {
		e.zstd.Close()
	}
}

// Encode compresses src into one blosc1 chunk with the options o.
func Encode(src []byte, o Options) ([]byte, error) {
	e, err := NewEncoder(o)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	return e.Encode(nil, src)
}

// Encode appends the blosc1 chunk of src to dst and returns the result.
// Blocks are split into Typesize streams under c-blosc's default rule (every
// codec but zstd, when Typesize <= 16 and Blocksize/Typesize >= 128, never
// the shorter last block). A stream that does not shrink is stored raw, and
// when the whole chunk would not be smaller than len(src)+16 bytes, or
// len(src) < 128, or Level is 0, the chunk stores src raw (memcpyed).
func (e *Encoder) Encode(dst, src []byte) ([]byte, error) {
	o := e.o
	nbytes := len(src)
	if nbytes > MaxBufferSize {
		return nil, fmt.Errorf("blosc: %d bytes exceed the blosc1 limit %d", nbytes, MaxBufferSize)
	}
	h := Header{
		Version:   formatVersion,
		VersionLZ: codecVersion,
		Typesize:  o.Typesize,
		Nbytes:    nbytes,
		Blocksize: computeBlocksize(o, nbytes),
	}
	h.Flags = o.Compressor.formatCode() << 5
	switch o.Shuffle {
	case ByteShuffle:
		h.Flags |= flagShuffle
	case BitShuffle:
		h.Flags |= flagBitShuffle
	}
	if !splits(o.Compressor, h.Typesize, h.Blocksize) {
		h.Flags |= flagDontSplit
	}
	start := len(dst)
	if o.Level > 0 && nbytes >= minBufferSize {
		out, ok := e.compress(dst, src, h)
		if ok {
			return out, nil
		}
		dst = out[:start]
	}
	h.Flags |= flagMemcpyed
	h.Cbytes = nbytes + HeaderSize
	dst = appendHeader(dst, h)
	return append(dst, src...), nil
}

// compress appends the compressed chunk; ok is false when it does not come
// out smaller than the memcpyed chunk.
func (e *Encoder) compress(dst, src []byte, h Header) (out []byte, ok bool) {
	start := len(dst)
	limit := h.Nbytes + HeaderSize
	nblocks := h.nblocks()
	dst = appendHeader(dst, h)
	dst = append(dst, make([]byte, 4*nblocks)...)
	if cap(e.shuffled) < h.Blocksize {
		e.shuffled = make([]byte, h.Blocksize)
	}
	for j := range nblocks {
		block := src[j*h.Blocksize : min((j+1)*h.Blocksize, h.Nbytes)]
		switch h.Shuffle() {
		case ByteShuffle:
			shuffleBlock(e.shuffled[:len(block)], block, h.Typesize)
			block = e.shuffled[:len(block)]
		case BitShuffle:
			bitShuffleBlock(e.shuffled[:len(block)], block, h.Typesize)
			block = e.shuffled[:len(block)]
		}
		binary.LittleEndian.PutUint32(dst[start+HeaderSize+4*j:], uint32(len(dst)-start))
		nsplits := h.nsplits(len(block))
		neblock := len(block) / nsplits
		for k := range nsplits {
			dst = e.appendStream(dst, block[k*neblock:(k+1)*neblock])
			if len(dst)-start >= limit {
				return dst, false
			}
		}
	}
	binary.LittleEndian.PutUint32(dst[start+12:], uint32(len(dst)-start))
	return dst, true
}

// appendStream appends the length-prefixed stream of split: compressed when
// that makes it shorter, else raw.
func (e *Encoder) appendStream(dst, split []byte) []byte {
	c := e.codec(split)
	if len(c) == 0 || len(c) >= len(split) {
		c = split
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(c)))
	return append(dst, c...)
}

// codec compresses split into e.codecBuf and returns it, or nil when the
// codec cannot make it shorter.
func (e *Encoder) codec(split []byte) []byte {
	switch e.o.Compressor {
	case BloscLZ:
		buf := e.buf(len(split))
		return buf[:encodeBloscLZ(buf, split, e.blosclz)]
	case LZ4, LZ4HC:
		buf := e.buf(lz4.CompressBlockBound(len(split)))
		var n int
		var err error
		if e.o.Compressor == LZ4 {
			n, err = e.lz4.CompressBlock(split, buf)
		} else {
			n, err = e.lz4hc.CompressBlock(split, buf)
		}
		if err != nil {
			return nil
		}
		return buf[:n]
	case Snappy:
		return snappy.Encode(e.buf(snappy.MaxEncodedLen(len(split))), split)
	case Zlib:
		e.zbuf.Reset()
		e.zlib.Reset(&e.zbuf)
		if _, err := e.zlib.Write(split); err != nil {
			return nil
		}
		if err := e.zlib.Close(); err != nil {
			return nil
		}
		return e.zbuf.Bytes()
	case Zstd:
		out := e.zstd.EncodeAll(split, e.codecBuf[:0])
		if cap(out) > cap(e.codecBuf) {
			e.codecBuf = out[:cap(out)]
		}
		return out
	}
	return nil
}

// buf returns e.codecBuf with length n, grown if needed.
func (e *Encoder) buf(n int) []byte {
	if cap(e.codecBuf) < n {
		e.codecBuf = make([]byte, n)
	}
	return e.codecBuf[:n]
}

func appendHeader(dst []byte, h Header) []byte {
	dst = append(dst, h.Version, h.VersionLZ, h.Flags, byte(h.Typesize))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(h.Nbytes))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(h.Blocksize))
	return binary.LittleEndian.AppendUint32(dst, uint32(h.Cbytes))
}

// splits reports whether c-blosc's default split mode (forward compatible)
// splits blocks of blocksize into typesize streams for c.
func splits(c Compressor, typesize, blocksize int) bool {
	return c != Zstd && typesize <= maxSplits && blocksize/typesize >= minBufferSize
}

// computeBlocksize picks the block size as c-blosc 1.21's compute_blocksize
// does for the options and nbytes.
func computeBlocksize(o Options, nbytes int) int {
	ts := o.Typesize
	if nbytes < ts {
		return 1
	}
	const l1 = 32 << 10
	hcr := o.Compressor == LZ4HC || o.Compressor == Zlib || o.Compressor == Zstd
	bs := nbytes
	switch {
	case o.Blocksize > 0:
		bs = min(max(o.Blocksize, minBufferSize), MaxBlocksize)
	case nbytes >= l1:
		bs = l1
		if hcr {
			bs *= 2
		}
		switch o.Level {
		case 0:
			bs /= 4
		case 1:
			bs /= 2
		case 2:
		case 3:
			bs *= 2
		case 4, 5:
			bs *= 4
		case 6, 7, 8:
			bs *= 8
		case 9:
			bs *= 8
			if hcr {
				bs *= 2
			}
		}
	}
	// Codecs that split get larger blocks, so that each stream is long.
	if o.Level > 0 && splits(o.Compressor, ts, bs) {
		bs = min(bs, 256<<10) * ts
		bs = min(max(bs, 64<<10), 1<<20)
	}
	bs = min(bs, nbytes)
	if bs > ts {
		bs = bs / ts * ts
	}
	return bs
}
