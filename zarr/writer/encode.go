package writer

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math"

	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockEncoder encodes blocks, one at a time. Its buffers are reused from
// block to block.
type blockEncoder struct {
	l     *layout
	chunk []byte // one chunk, C order, little-endian
	swap  []byte // the chunk transposed or byte-swapped
	comp  []byte // one compressed chunk
	obj   []byte // the object being assembled
	// at, ext, srcAt, srcShape and zero describe the chunk being
	// extracted (see extract).
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

func newBlockEncoder(l *layout) *blockEncoder {
	return &blockEncoder{
		l:        l,
		chunk:    make([]byte, l.chunkBytes),
		at:       make([]int64, len(l.block)),
		ext:      make([]int64, len(l.block)),
		srcAt:    make([]int64, len(l.block)),
		srcShape: make([]int64, len(l.block)),
		zero:     make([]int64, len(l.block)),
	}
}

// encodeBlock returns the object of the block at grid position g, whose data
// src covers, or nil when every chunk in it is skipped as empty. The result
// is valid until the next call.
func (e *blockEncoder) encodeBlock(g []int64, src region) ([]byte, error) {
	l := e.l
	s := &l.spec
	if !l.sharded {
		for d := range g {
			e.at[d] = g[d] * s.ChunkShape[d]
		}
		if !e.extract(src) {
			return nil, nil
		}
		return e.encodeChunk()
	}
	n := int(product(l.inner))
	indexBytes := 16*n + 4
	e.obj = e.obj[:0]
	if s.IndexAtStart {
		e.obj = append(e.obj, make([]byte, indexBytes)...)
	}
	index := make([]byte, 16*n)
	stored := 0
	c := make([]int64, len(g)) // position of the chunk in the shard's chunk grid
	for i := range n {
		empty := false
		for d := range g {
			e.at[d] = g[d]*s.ShardShape[d] + c[d]*s.ChunkShape[d]
			empty = empty || e.at[d] >= s.Shape[d]
		}
		entry := index[16*i : 16*i+16]
		if !empty && e.extract(src) {
			enc, err := e.encodeChunk()
			if err != nil {
				return nil, err
			}
			binary.LittleEndian.PutUint64(entry, uint64(len(e.obj)))
			binary.LittleEndian.PutUint64(entry[8:], uint64(len(enc)))
			e.obj = append(e.obj, enc...)
			stored++
		} else {
			binary.LittleEndian.PutUint64(entry, math.MaxUint64)
			binary.LittleEndian.PutUint64(entry[8:], math.MaxUint64)
		}
		for d := len(c) - 1; d >= 0; d-- {
			if c[d]++; c[d] < l.inner[d] {
				break
			}
			c[d] = 0
		}
	}
	if stored == 0 {
		return nil, nil
	}
	sum := crc32.Checksum(index, castagnoli)
	if s.IndexAtStart {
		copy(e.obj, index)
		binary.LittleEndian.PutUint32(e.obj[16*n:], sum)
		return e.obj, nil
	}
	e.obj = append(e.obj, index...)
	return binary.LittleEndian.AppendUint32(e.obj, sum), nil
}

// extract copies the chunk at e.at from src into e.chunk, padding the part
// outside the array with the fill value. It reports false when the chunk
// is to be skipped as empty.
func (e *blockEncoder) extract(src region) bool {
	l := e.l
	s := &l.spec
	partial := false
	for d, at := range e.at {
		e.ext[d] = min(s.ChunkShape[d], s.Shape[d]-at)
		partial = partial || e.ext[d] < s.ChunkShape[d]
		e.srcAt[d] = at - src.box[d].Start
		e.srcShape[d] = src.box[d].Stop - src.box[d].Start
	}
	if partial {
		copy(e.chunk, l.fillChunk)
	}
	copyBox(e.chunk, s.ChunkShape, e.zero, src.data, e.srcShape, e.srcAt, e.ext, l.ti.size)
	return !s.SkipEmptyChunks || !bytes.Equal(e.chunk, l.fillChunk)
}

// encodeChunk runs e.chunk through the codec chain: transpose, byte order,
// compressor. The result is valid until the next call.
func (e *blockEncoder) encodeChunk() ([]byte, error) {
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
	c := s.Compression
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
