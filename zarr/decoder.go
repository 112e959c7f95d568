package zarr

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// DefaultMaxChunkBytes is the MaxChunkBytes a zero DecoderOptions means.
const DefaultMaxChunkBytes = 512 << 20

// DecoderOptions configures a Decoder.
type DecoderOptions struct {
	// MaxChunkBytes bounds every buffer a Decoder allocates and every
	// chunk it decodes: a decoded chunk, or an intermediate stage of a
	// chain, larger than this fails with an error wrapping ErrTooLarge.
	// Zero means DefaultMaxChunkBytes; it must not be negative.
	MaxChunkBytes int
}

// Decoder decodes chunks on the CPU. It is long-lived: it keeps its
// decompressors and scratch buffers, so decoding a stream of chunks with
// one Decoder allocates nothing in the steady state (chains with one
// compressor decode straight into the caller's buffer).
//
// A Decoder is not safe for concurrent use: give each worker goroutine
// its own. Close releases it.
type Decoder struct {
	max     int
	zstd    *zstd.Decoder
	gzip    *gzip.Reader  // created on first use
	zlib    io.ReadCloser // created on first use
	br      bytes.Reader
	scratch [][2][]byte // per nesting depth: ping-pong buffers for intermediate stages
	chunks  [][]byte    // per nesting depth: an inner chunk decoded while decoding a whole shard
}

// NewDecoder returns a Decoder.
func NewDecoder(o DecoderOptions) (*Decoder, error) {
	if o.MaxChunkBytes < 0 {
		return nil, fmt.Errorf("zarr: DecoderOptions.MaxChunkBytes is %d, want 0 (default) or more", o.MaxChunkBytes)
	}
	d := &Decoder{max: o.MaxChunkBytes}
	if d.max == 0 {
		d.max = DefaultMaxChunkBytes
	}
	zd, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("zarr: zstd decoder: %w", err)
	}
	d.zstd = zd
	return d, nil
}

// Close releases the decoder's resources. It is safe to call more than
// once; a closed Decoder must not be used again.
func (d *Decoder) Close() {
	if d.zstd != nil {
		d.zstd.Close()
		d.zstd = nil
	}
	d.scratch, d.chunks = nil, nil
}

// DecodeSlack is how many bytes of dst's capacity past the chunk Decode
// may use as scratch: zstd decodes the last block of a chunk faster with
// room to spare (about 15% for a chunk of two 128 KiB blocks).
const DecodeSlack = 16

// Decode decodes the stored bytes src of chunk ch into dst, which must be
// at least ch.Codec.Layout().Bytes() long; that many bytes are written,
// laid out as the layout says, and up to DecodeSlack bytes of dst's
// capacity past them may be overwritten (cap dst at the chunk to forbid
// it). Checksums are verified. A chunk
// that does not decode, or decodes to another size, fails with a
// *FormatError naming ch.Key and ch.Offset.
func (d *Decoder) Decode(dst []byte, ch *Chunk, src []byte) error {
	c := ch.Codec
	fail := func(err error) error { return &FormatError{Key: ch.Key, Offset: ch.Offset, Err: err} }
	if d.zstd == nil {
		return errors.New("zarr: Decoder used after Close")
	}
	if c.size > d.max {
		return fail(tooLarge("decoded chunk", c.size, d.max))
	}
	if len(dst) < c.size {
		return fmt.Errorf("zarr: decode %s: destination of %d bytes, the chunk needs %d", ch.Key, len(dst), c.size)
	}
	// Cap the capacity too: decompressors may use spare capacity as
	// scratch (wild copies), which must not touch the caller's bytes past
	// the chunk and its slack (a neighbouring chunk being decoded
	// concurrently).
	if err := d.decode(dst[:c.size:min(cap(dst), c.size+DecodeSlack)], c, src, 0); err != nil {
		return fail(err)
	}
	return nil
}

func tooLarge(what string, n, limit int) error {
	return &reason{kind: ErrTooLarge, msg: fmt.Sprintf("%s of %d bytes exceeds the limit of %d", what, n, limit)}
}

// decode runs chain c backwards over src into dst (exactly c.size bytes).
// depth counts enclosing shards, to pick scratch buffers.
func (d *Decoder) decode(dst []byte, c *ChunkCodec, src []byte, depth int) error {
	for len(d.scratch) <= depth {
		d.scratch = append(d.scratch, [2][]byte{})
		d.chunks = append(d.chunks, nil)
	}
	cur := src
	last := 0 // the stage that writes into dst; stages before it use scratch
	if c.sharding != nil {
		last = -1
	}
	for i := len(c.bytes) - 1; i >= 0; i-- {
		if i == last {
			n, err := c.bytes[i].decode(d, dst, cur)
			if err == errShortDst {
				return corrupt(nil, "%s: decodes to more than the chunk's %d bytes", c.bytes[i].codecName(), len(dst))
			}
			if err != nil {
				return err
			}
			if n != len(dst) {
				return corrupt(nil, "%s: decodes to %d bytes, the chunk has %d", c.bytes[i].codecName(), n, len(dst))
			}
			return nil
		}
		out, err := d.stage(c.bytes[i], cur, &d.scratch[depth][i&1])
		if err != nil {
			return err
		}
		cur = out
	}
	if c.sharding != nil {
		return d.decodeShard(dst, c.sharding, cur, depth)
	}
	if len(cur) != len(dst) {
		return corrupt(nil, "%d stored bytes, the chunk has %d", len(cur), len(dst))
	}
	copy(dst, cur)
	return nil
}

// stage decodes src with b into the scratch buffer *buf, growing it (up to
// the decoder's limit) until the output fits.
func (d *Decoder) stage(b bytesToBytes, src []byte, buf *[]byte) ([]byte, error) {
	size := 4*len(src) + 4096
	if h, ok := b.(sizeHinter); ok {
		if n, ok := h.sizeHint(src); ok {
			size = n
		}
	}
	size = min(max(size, 1), d.max)
	for {
		if cap(*buf) < size {
			*buf = make([]byte, size)
		}
		out := (*buf)[:size]
		n, err := b.decode(d, out, src)
		if err == nil {
			return out[:n], nil
		}
		if err != errShortDst {
			return nil, err
		}
		if size >= d.max {
			return nil, tooLarge(b.codecName()+" output", size+1, d.max)
		}
		size = min(2*size, d.max)
	}
}

// decodeShard decodes a whole shard (a chunk whose array-to-bytes codec is
// sharding_indexed) into dst, in C order and little-endian over the shard
// shape.
func (d *Decoder) decodeShard(dst []byte, s *Sharding, b []byte, depth int) error {
	shard := Extent{Length: int64(len(b))}
	at, err := s.IndexOffset(shard)
	if err == nil {
		var idx *ShardIndex
		if idx, err = s.ParseIndex(shard, b[at:at+s.indexBytes]); err == nil {
			return d.decodeShardChunks(dst, s, b, idx, depth)
		}
	}
	if fe, ok := err.(*FormatError); ok {
		return fmt.Errorf("inner shard at byte %d: %w", fe.Offset, fe.Err)
	}
	return err
}

// decodeShardChunks decodes the inner chunks idx locates in b into dst.
func (d *Decoder) decodeShardChunks(dst []byte, s *Sharding, b []byte, idx *ShardIndex, depth int) error {
	inner := s.inner
	dt := inner.layout.DataType
	shardLayout := cLayout(s.shape, dt)
	ext := make([]int64, len(s.shape))
	origin := make([]int64, len(s.shape))
	zero := make([]int64, len(s.shape))
	copy(ext, s.chunkShape)
	if cap(d.chunks[depth]) < inner.size {
		d.chunks[depth] = make([]byte, inner.size)
	}
	tmp := d.chunks[depth][:inner.size]
	g := make([]int64, len(s.grid))
	for i, e := range idx.Entries {
		gridCoord(g, int64(i), s.grid)
		for k := range g {
			origin[k] = g[k] * s.chunkShape[k]
		}
		if e.Empty() {
			fillBlock(dst, shardLayout, origin, ext, inner.fill)
			continue
		}
		if err := d.decode(tmp, inner, b[e.Offset:e.Offset+e.Length], depth+1); err != nil {
			return fmt.Errorf("inner chunk %v at byte %d: %w", g, e.Offset, err)
		}
		copyBlock(dst, shardLayout, origin, tmp, inner.layout, zero, ext)
	}
	return nil
}

// gridCoord sets g to the C-order coordinate of linear index i in grid.
func gridCoord(g []int64, i int64, grid []int64) {
	for k := len(grid) - 1; k >= 0; k-- {
		g[k] = i % grid[k]
		i /= grid[k]
	}
}
