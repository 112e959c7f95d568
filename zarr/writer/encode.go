package writer

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunkEncoder encodes one chunk at a time: it copies the chunk out of the
// caller's region, then runs it through the codec chain. Its buffers and
// codec states are reused from chunk to chunk.
type chunkEncoder struct {
	l     *layout
	chunk []byte // one chunk, C order, little-endian
	swap  []byte // the chunk transposed or byte-swapped
	comp  []byte // one compressed chunk
	part  []byte // the inside part of an edge chunk, from a source function
	// at is the chunk's origin in the array; ext, srcAt, srcShape and zero
	// describe its copy (see extract).
	at, ext, srcAt, srcShape, zero []int64

	zstd   *zstd.Encoder
	lz4    lz4.Compressor
	buf    bytes.Buffer
	stream streamWriter // gzip or zlib
	blosc  *blosc.Encoder
}

// streamWriter is a *gzip.Writer or a *zlib.Writer.
type streamWriter interface {
	io.WriteCloser
	Reset(w io.Writer)
}

func newChunkEncoder(l *layout) *chunkEncoder {
	return &chunkEncoder{
		l:        l,
		chunk:    make([]byte, l.chunkBytes),
		at:       make([]int64, len(l.block)),
		ext:      make([]int64, len(l.block)),
		srcAt:    make([]int64, len(l.block)),
		srcShape: make([]int64, len(l.block)),
		zero:     make([]int64, len(l.block)),
	}
}

// blockEncoder lays out the objects of blocks, one block at a time, from
// chunks encoded by up to len(parts) goroutines.
type blockEncoder struct {
	index []byte // a shard's index and its checksum
	// parts[w] holds the chunks goroutine w encoded, back to back; chunks
	// says where each of the block's chunks is.
	parts  [][]byte
	chunks []chunkLoc
	pieces [][]byte // the object, in pieces to write in order
}

// chunkLoc locates an encoded chunk in blockEncoder.parts.
type chunkLoc struct {
	part     int // -1: the chunk is not stored
	off, len int
}

// encodeBlock returns the object of the block at grid position g, whose data
// src covers, as pieces to be written in order, or nil when every chunk in
// it is skipped as empty. Up to p goroutines encode its chunks. The result
// is valid until the next call.
func (a *Array) encodeBlock(e *blockEncoder, g []int64, src source, p int) ([][]byte, error) {
	l := a.l
	s := &l.spec
	n := int(product(l.inner))
	p = max(1, min(p, n))
	for len(e.parts) < p {
		e.parts = append(e.parts, nil)
	}
	if cap(e.chunks) < n {
		e.chunks = make([]chunkLoc, n)
	}
	e.chunks = e.chunks[:n]
	var next atomic.Int64
	errs := make([]error, p)
	work := func(w int) {
		part := e.parts[w][:0]
		defer func() { e.parts[w] = part }()
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			e.chunks[i].part = -1
			a.slots <- struct{}{}
			c := a.chunkEncoders.Get().(*chunkEncoder)
			// The chunk's origin: the block's, plus chunk i's position in
			// the block's chunk grid (C order).
			outside := false
			k := int64(i)
			for d := len(g) - 1; d >= 0; d-- {
				c.at[d] = g[d]*l.block[d] + k%l.inner[d]*s.ChunkShape[d]
				k /= l.inner[d]
				outside = outside || c.at[d] >= s.Shape[d]
			}
			var err error
			if !outside {
				var keep bool
				if keep, err = c.load(src); keep {
					var enc []byte
					if enc, err = c.encode(); err == nil {
						e.chunks[i] = chunkLoc{part: w, off: len(part), len: len(enc)}
						part = append(part, enc...)
					}
				}
			}
			a.chunkEncoders.Put(c)
			<-a.slots
			if err != nil {
				errs[w] = fmt.Errorf("chunk %d: %w", i, err)
				next.Store(int64(n)) // stop the other goroutines
				return
			}
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < p; w++ {
		wg.Go(func() { work(w) })
	}
	work(0)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	e.pieces = e.pieces[:0]
	if !l.sharded {
		if c := e.chunks[0]; c.part >= 0 {
			e.pieces = append(e.pieces, e.parts[c.part][c.off:c.off+c.len])
			return e.pieces, nil
		}
		return nil, nil
	}

	// The shard: chunks in C order, the index before or after them.
	indexBytes := 16*n + 4
	e.index = grow(e.index, indexBytes)
	if s.IndexAtStart {
		e.pieces = append(e.pieces, e.index)
	}
	off := 0
	if s.IndexAtStart {
		off = indexBytes
	}
	for i, c := range e.chunks {
		entry := e.index[16*i : 16*i+16]
		if c.part < 0 {
			binary.LittleEndian.PutUint64(entry, math.MaxUint64)
			binary.LittleEndian.PutUint64(entry[8:], math.MaxUint64)
			continue
		}
		binary.LittleEndian.PutUint64(entry, uint64(off))
		binary.LittleEndian.PutUint64(entry[8:], uint64(c.len))
		e.pieces = append(e.pieces, e.parts[c.part][c.off:c.off+c.len])
		off += c.len
	}
	if len(e.pieces) == 0 || s.IndexAtStart && len(e.pieces) == 1 {
		return nil, nil // every chunk skipped
	}
	binary.LittleEndian.PutUint32(e.index[16*n:], crc32.Checksum(e.index[:16*n], castagnoli))
	if !s.IndexAtStart {
		e.pieces = append(e.pieces, e.index)
	}
	return e.pieces, nil
}

// load fills e.chunk with the chunk at e.at from src, padding the part
// outside the array with the fill value. It reports false when the chunk
// is to be skipped as empty.
func (e *chunkEncoder) load(src source) (bool, error) {
	l := e.l
	s := &l.spec
	partial := false
	for d, at := range e.at {
		e.ext[d] = min(s.ChunkShape[d], s.Shape[d]-at)
		partial = partial || e.ext[d] < s.ChunkShape[d]
	}
	if partial {
		copy(e.chunk, l.fillChunk)
	}
	data := src.data
	if src.fn != nil {
		// Ask for the part inside the array; a whole chunk lands in place.
		box := make([]zarr.Range, len(e.at))
		for d, at := range e.at {
			box[d] = zarr.Range{Start: at, Stop: at + e.ext[d]}
			e.srcAt[d] = 0
			e.srcShape[d] = e.ext[d]
		}
		dst := e.chunk
		if partial {
			e.part = grow(e.part, boxBytes(box, l.ti.size))
			dst = e.part
		}
		if err := src.fn(dst, box); err != nil {
			return false, err
		}
		if !partial {
			return e.keep(), nil
		}
		data = dst
	} else {
		for d, at := range e.at {
			e.srcAt[d] = at - src.box[d].Start
			e.srcShape[d] = src.box[d].Stop - src.box[d].Start
		}
	}
	copyBox(e.chunk, s.ChunkShape, e.zero, data, e.srcShape, e.srcAt, e.ext, l.ti.size)
	return e.keep(), nil
}

// keep reports whether e.chunk is to be stored: not skipped as all fill.
func (e *chunkEncoder) keep() bool {
	return !e.l.spec.SkipEmptyChunks || !bytes.Equal(e.chunk, e.l.fillChunk)
}

// encode runs e.chunk through the codec chain: transpose, byte order,
// compressor. The result is valid until the next call.
func (e *chunkEncoder) encode() ([]byte, error) {
	l := e.l
	s := &l.spec
	data := e.chunk
	if s.Order == 'F' {
		e.swap = transposeF(e.swap[:0], data, s.ChunkShape, l.ti.size)
		data = e.swap
	}
	if s.BigEndian && l.ti.size > 1 {
		if s.Order != 'F' {
			e.swap = append(e.swap[:0], data...)
			data = e.swap
		}
		swapBytes(data, l.ti.size)
	}
	out, err := e.compress(data)
	if err != nil {
		return nil, fmt.Errorf("%v encoder: %w", s.Compression.Codec, err)
	}
	return out, nil
}

// compress runs the compressor on data.
func (e *chunkEncoder) compress(data []byte) ([]byte, error) {
	c := e.l.spec.Compression
	switch c.Codec {
	case Zstd:
		if e.zstd == nil {
			level := c.Level
			if level == 0 {
				level = 3 // zstd's own default
			}
			enc, err := zstd.NewWriter(nil,
				zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
				zstd.WithEncoderCRC(c.Checksum),
				zstd.WithEncoderConcurrency(1))
			if err != nil {
				return nil, err
			}
			e.zstd = enc
		}
		e.comp = e.zstd.EncodeAll(data, e.comp[:0])
		return e.comp, nil
	case Gzip, Zlib:
		e.buf.Reset()
		if e.stream == nil {
			var err error
			if c.Codec == Gzip {
				e.stream, err = gzip.NewWriterLevel(&e.buf, c.Level)
			} else {
				e.stream, err = zlib.NewWriterLevel(&e.buf, c.Level)
			}
			if err != nil {
				return nil, err
			}
		} else {
			e.stream.Reset(&e.buf)
		}
		_, err := e.stream.Write(data)
		if cerr := e.stream.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		return e.buf.Bytes(), nil
	case LZ4:
		e.comp = grow(e.comp, 4+lz4.CompressBlockBound(len(data)))
		n, err := e.lz4.CompressBlock(data, e.comp[4:])
		if err != nil {
			return nil, err
		}
		binary.LittleEndian.PutUint32(e.comp, uint32(len(data)))
		return e.comp[:4+n], nil
	case Blosc:
		return e.encodeBlosc(data)
	}
	return data, nil
}

// grow returns b resized to n bytes, reallocated only when too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// copyBox copies the elements of a box of extents ext from src (C order,
// shape srcShape, box at srcAt) to dst (C order, shape dstShape, box at
// dstAt). Elements are size bytes.
func copyBox(dst []byte, dstShape, dstAt []int64, src []byte, srcShape, srcAt []int64, ext []int64, size int) {
	rank := len(ext)
	row := int(ext[rank-1]) * size
	idx := make([]int64, rank)
	for {
		var so, do int64
		for d := range rank {
			so = so*srcShape[d] + srcAt[d] + idx[d]
			do = do*dstShape[d] + dstAt[d] + idx[d]
		}
		so *= int64(size)
		do *= int64(size)
		copy(dst[do:do+int64(row)], src[so:so+int64(row)])
		d := rank - 2
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < ext[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// transposeF appends the C-order array src of the given shape to dst in
// Fortran order: the transpose that reverses the axes.
func transposeF(dst, src []byte, shape []int64, size int) []byte {
	rank := len(shape)
	fstride := make([]int64, rank) // in elements
	n := int64(1)
	for d := range rank {
		fstride[d] = n
		n *= shape[d]
	}
	dst = grow(dst, len(src))
	idx := make([]int64, rank)
	var at int64 // Fortran-order offset of idx
	for i := 0; i < len(src); i += size {
		o := int(at) * size
		copy(dst[o:o+size], src[i:i+size])
		for d := rank - 1; d >= 0; d-- {
			idx[d]++
			at += fstride[d]
			if idx[d] < shape[d] {
				break
			}
			at -= shape[d] * fstride[d]
			idx[d] = 0
		}
	}
	return dst
}

// swapBytes reverses the bytes of each size-byte element of b in place.
func swapBytes(b []byte, size int) {
	switch size {
	case 2:
		for i := 0; i+1 < len(b); i += 2 {
			b[i], b[i+1] = b[i+1], b[i]
		}
	case 4:
		for i := 0; i+3 < len(b); i += 4 {
			binary.BigEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:]))
		}
	case 8:
		for i := 0; i+7 < len(b); i += 8 {
			binary.BigEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:]))
		}
	}
}
