package zarr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/damacy-go/damacy/zarr/blosc"
)

// This file is a small independent zarr writer for the tests: it encodes
// arrays chunk by chunk through a test description of a codec chain
// (tchain), so that the reader is checked against bytes built here, not
// against its own encoder.

// randArray returns n random elements of dt, little-endian; bools are 0/1.
// About half the elements repeat their predecessor, so that the data
// compresses, but no two calls give the same array.
func randArray(rng *rand.Rand, dt DataType, n int64) []byte {
	size := dt.Size()
	b := make([]byte, n*int64(size))
	for i := 0; i < len(b); i += size {
		if i > 0 && rng.IntN(2) == 0 {
			copy(b[i:i+size], b[i-size:i])
			continue
		}
		for j := range size {
			b[i+j] = byte(rng.Uint32())
		}
		if dt == Bool {
			b[i] &= 1
		}
	}
	return b
}

// tchain describes a codec chain for the test writer.
type tchain struct {
	perm   []int    // transpose order; nil for none
	endian Endian   // bytes codec byte order
	shard  *tshard  // when set, the array-to-bytes codec is sharding_indexed
	bb     []tcodec // bytes-to-bytes codecs, in chain order
	extra  []string // raw JSON codecs appended to the chain's JSON (for error tests)
}

// tshard describes a sharding_indexed codec.
type tshard struct {
	chunk   []int64 // inner chunk shape
	inner   *tchain
	atStart bool
	noCRC   bool                 // index codecs without crc32c
	empty   func(g []int64) bool // inner chunks to leave empty; nil for none
}

// tcodec is a bytes-to-bytes codec: its JSON and its encoder.
type tcodec struct {
	json string
	enc  func(t testing.TB, b []byte) []byte
}

func (c *tchain) json() string {
	var parts []string
	if c.perm != nil {
		o, _ := json.Marshal(c.perm)
		parts = append(parts, fmt.Sprintf(`{"name":"transpose","configuration":{"order":%s}}`, o))
	}
	if c.shard != nil {
		s := c.shard
		cs, _ := json.Marshal(s.chunk)
		idx := `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`
		if s.noCRC {
			idx = `[{"name":"bytes","configuration":{"endian":"little"}}]`
		}
		loc := "end"
		if s.atStart {
			loc = "start"
		}
		parts = append(parts, fmt.Sprintf(`{"name":"sharding_indexed","configuration":{"chunk_shape":%s,"codecs":%s,"index_codecs":%s,"index_location":%q}}`,
			cs, s.inner.json(), idx, loc))
	} else {
		parts = append(parts, fmt.Sprintf(`{"name":"bytes","configuration":{"endian":%q}}`, c.endian))
	}
	for _, b := range c.bb {
		parts = append(parts, b.json)
	}
	parts = append(parts, c.extra...)
	return "[" + strings.Join(parts, ",") + "]"
}

// encode encodes one chunk: data holds shape elements of dt in C order,
// little-endian.
func (c *tchain) encode(t testing.TB, data []byte, shape []int64, dt DataType, fill []byte) []byte {
	t.Helper()
	cur, curShape := data, shape
	if c.perm != nil {
		cur, curShape = transposeC(data, shape, c.perm, dt.Size())
	}
	var out []byte
	if c.shard != nil {
		out = c.shard.encode(t, cur, curShape, dt, fill)
	} else {
		out = swapBytes(cur, dt.Size(), c.endian)
	}
	for _, b := range c.bb {
		out = b.enc(t, out)
	}
	return out
}

// encode builds a shard from its C-order data.
func (s *tshard) encode(t testing.TB, data []byte, shape []int64, dt DataType, fill []byte) []byte {
	t.Helper()
	grid := make([]int64, len(shape))
	n := int64(1)
	for i := range shape {
		grid[i] = shape[i] / s.chunk[i]
		n *= grid[i]
	}
	var body bytes.Buffer
	index := make([]byte, 16*n)
	idxLen := int64(16*n) + 4
	if s.noCRC {
		idxLen -= 4
	}
	base := int64(0)
	if s.atStart {
		base = idxLen
	}
	g := make([]int64, len(grid))
	for i := int64(0); i < n; i++ {
		gridCoord(g, i, grid)
		if s.empty != nil && s.empty(g) {
			binary.LittleEndian.PutUint64(index[16*i:], sentinel)
			binary.LittleEndian.PutUint64(index[16*i+8:], sentinel)
			continue
		}
		origin := make([]int64, len(g))
		for k := range g {
			origin[k] = g[k] * s.chunk[k]
		}
		chunk := extract(data, shape, origin, s.chunk, dt.Size(), fill)
		enc := s.inner.encode(t, chunk, s.chunk, dt, fill)
		binary.LittleEndian.PutUint64(index[16*i:], uint64(base+int64(body.Len())))
		binary.LittleEndian.PutUint64(index[16*i+8:], uint64(len(enc)))
		body.Write(enc)
	}
	if !s.noCRC {
		index = binary.LittleEndian.AppendUint32(index, crc32.Checksum(index, castagnoli))
	}
	if s.atStart {
		return append(index, body.Bytes()...)
	}
	return append(body.Bytes(), index...)
}

// transposeC permutes the axes of a C-order array: output axis i is input
// axis perm[i].
func transposeC(data []byte, shape []int64, perm []int, size int) ([]byte, []int64) {
	rank := len(shape)
	out := make([]byte, len(data))
	oshape := make([]int64, rank)
	for i, p := range perm {
		oshape[i] = shape[p]
	}
	in := cLayout(shape, Uint8)
	// Output element at encoded position b comes from input position a with
	// a[perm[i]] = b[i].
	ostr := make([]int64, rank)
	s := int64(1)
	for i := rank - 1; i >= 0; i-- {
		ostr[i] = s
		s *= oshape[i]
	}
	a := make([]int64, rank)
	for lin := int64(0); lin < s; lin++ {
		rem := lin
		for i := 0; i < rank; i++ {
			b := rem / ostr[i]
			rem %= ostr[i]
			a[perm[i]] = b
		}
		src := int64(0)
		for k := range a {
			src += a[k] * in.Strides[k]
		}
		copy(out[lin*int64(size):][:size], data[src*int64(size):][:size])
	}
	return out, oshape
}

// swapBytes returns data with each size-byte element in order e.
func swapBytes(data []byte, size int, e Endian) []byte {
	out := bytes.Clone(data)
	if e == BigEndian && size > 1 {
		for i := 0; i < len(out); i += size {
			for a, b := i, i+size-1; a < b; a, b = a+1, b-1 {
				out[a], out[b] = out[b], out[a]
			}
		}
	}
	return out
}

// extract returns the block of extent ext at origin of the C-order array
// data (shape), C order, with elements outside the array set to fill.
func extract(data []byte, shape, origin, ext []int64, size int, fill []byte) []byte {
	n := int64(1)
	for _, e := range ext {
		n *= e
	}
	out := make([]byte, n*int64(size))
	src := cLayout(shape, Uint8)
	c := make([]int64, len(ext))
	for lin := int64(0); lin < n; lin++ {
		gridCoord(c, lin, ext)
		inside := true
		off := int64(0)
		for k := range c {
			p := origin[k] + c[k]
			if p < 0 || p >= shape[k] {
				inside = false
				break
			}
			off += p * src.Strides[k]
		}
		dst := out[lin*int64(size):][:size]
		if inside {
			copy(dst, data[off*int64(size):])
		} else {
			copy(dst, fill)
		}
	}
	return out
}

// Bytes-to-bytes encoders.

func zstdCodecT(checksum, noContentSize, twoFrames bool) tcodec {
	whole, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(checksum), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	// A window smaller than the data makes the streaming writer emit
	// blocks as they fill, with no content size in the frame header.
	stream, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(checksum), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(zstd.MinWindowSize))
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	enc := func(p []byte) []byte {
		if !noContentSize {
			return whole.EncodeAll(p, nil)
		}
		mu.Lock()
		defer mu.Unlock()
		var buf bytes.Buffer
		stream.Reset(&buf)
		stream.Write(p)
		stream.Close()
		return buf.Bytes()
	}
	return tcodec{
		json: fmt.Sprintf(`{"name":"zstd","configuration":{"level":3,"checksum":%v}}`, checksum),
		enc: func(t testing.TB, b []byte) []byte {
			if twoFrames {
				h := len(b) / 2
				return append(enc(b[:h]), enc(b[h:])...)
			}
			return enc(b)
		},
	}
}

var gzipT = tcodec{
	json: `{"name":"gzip","configuration":{"level":5}}`,
	enc: func(t testing.TB, b []byte) []byte {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, 5)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	},
}

var zlibT = tcodec{
	json: `{"name":"numcodecs.zlib","configuration":{"level":1}}`,
	enc: func(t testing.TB, b []byte) []byte {
		var buf bytes.Buffer
		w, _ := zlib.NewWriterLevel(&buf, 1)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	},
}

var lz4T = tcodec{
	json: `{"name":"numcodecs.lz4","configuration":{"acceleration":1}}`,
	enc:  lz4Numcodecs,
}

func lz4Numcodecs(t testing.TB, b []byte) []byte {
	out := make([]byte, 4+lz4.CompressBlockBound(len(b)))
	binary.LittleEndian.PutUint32(out, uint32(len(b)))
	n, err := lz4.CompressBlock(b, out[4:], nil)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("lz4: block of %d bytes did not compress into a buffer of its bound", len(b))
	}
	return out[:4+n]
}

var crc32cT = tcodec{
	json: `{"name":"crc32c"}`,
	enc: func(t testing.TB, b []byte) []byte {
		return binary.LittleEndian.AppendUint32(bytes.Clone(b), crc32.Checksum(b, castagnoli))
	},
}

func bloscT(cname string, shuffle blosc.Shuffle, typesize int) tcodec {
	names := map[blosc.Shuffle]string{blosc.NoShuffle: "noshuffle", blosc.ByteShuffle: "shuffle", blosc.BitShuffle: "bitshuffle"}
	var (
		mu  sync.Mutex
		enc *blosc.Encoder // made on first use, then reused: encoders are costly
	)
	return tcodec{
		json: fmt.Sprintf(`{"name":"blosc","configuration":{"cname":%q,"clevel":5,"shuffle":%q,"typesize":%d,"blocksize":0}}`, cname, names[shuffle], typesize),
		enc: func(t testing.TB, b []byte) []byte {
			mu.Lock()
			defer mu.Unlock()
			if enc == nil {
				c, err := blosc.ParseCompressor(cname)
				if err != nil {
					t.Fatal(err)
				}
				if enc, err = blosc.NewEncoder(blosc.Options{Compressor: c, Level: 5, Shuffle: shuffle, Typesize: typesize}); err != nil {
					t.Fatal(err)
				}
			}
			out, err := enc.Encode(nil, b)
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
}

// tarray is an array for the test writer.
type tarray struct {
	shape []int64
	chunk []int64 // chunk grid cell shape
	dt    DataType
	fill  string // JSON fill value
	chain *tchain
	keys  string               // chunk_key_encoding JSON; "" for the default
	skip  func(g []int64) bool // grid cells not written
	attrs string               // attributes JSON; "" for none
}

func (a *tarray) metadata() string {
	shape, _ := json.Marshal(a.shape)
	chunk, _ := json.Marshal(a.chunk)
	keys := a.keys
	if keys == "" {
		keys = `{"name":"default","configuration":{"separator":"/"}}`
	}
	fill := a.fill
	if fill == "" {
		fill = "0"
	}
	attrs := ""
	if a.attrs != "" {
		attrs = `,"attributes":` + a.attrs
	}
	return fmt.Sprintf(`{"zarr_format":3,"node_type":"array","shape":%s,"data_type":%q,`+
		`"chunk_grid":{"name":"regular","configuration":{"chunk_shape":%s}},"chunk_key_encoding":%s,`+
		`"fill_value":%s,"codecs":%s%s}`, shape, a.dt, chunk, keys, fill, a.chain.json(), attrs)
}

// write stores the array data (C order, little-endian) under path in fsys
// and returns the fill value bytes it used for padding.
func (a *tarray) write(t testing.TB, fsys fstest.MapFS, path string, data []byte) {
	t.Helper()
	meta := a.metadata()
	info, err := mustParseV3(meta)
	if err != nil {
		t.Fatalf("test metadata does not validate: %v\n%s", err, meta)
	}
	fsys[joinKey(path, "zarr.json")] = &fstest.MapFile{Data: []byte(meta)}
	grid := make([]int64, len(a.shape))
	n := int64(1)
	for i := range grid {
		grid[i] = (a.shape[i] + a.chunk[i] - 1) / a.chunk[i]
		n *= grid[i]
	}
	g := make([]int64, len(grid))
	for i := int64(0); i < n; i++ {
		gridCoord(g, i, grid)
		if a.skip != nil && a.skip(g) {
			continue
		}
		origin := make([]int64, len(g))
		for k := range g {
			origin[k] = g[k] * a.chunk[k]
		}
		chunk := extract(data, a.shape, origin, a.chunk, a.dt.Size(), info.fill)
		fsys[joinKey(path, info.keys.key(g))] = &fstest.MapFile{Data: a.chain.encode(t, chunk, a.chunk, a.dt, info.fill)}
	}
}

func mustParseV3(doc string) (*arrayInfo, error) {
	m, err := ParseArrayMetadataV3([]byte(doc))
	if err != nil {
		return nil, err
	}
	return m.resolve("")
}

// openMap opens the array at path in fsys.
func openMap(t testing.TB, fsys fstest.MapFS, path string) *Array {
	t.Helper()
	a, err := OpenStore(NewFSStore(fsys), path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// expectRegion computes the box of the C-order array data from first
// principles: the element when inside the array and its grid cell is
// stored, the fill value otherwise. missing reports whether an element's
// data is absent (its chunk, shard or inner chunk was not written).
func expectRegion(data []byte, shape []int64, dt DataType, fill []byte, box []Range, missing func(p []int64) bool) []byte {
	size := dt.Size()
	ext := make([]int64, len(box))
	n := int64(1)
	for i, r := range box {
		ext[i] = r.Len()
		n *= ext[i]
	}
	out := make([]byte, n*int64(size))
	src := cLayout(shape, Uint8)
	c := make([]int64, len(box))
	p := make([]int64, len(box))
	for lin := int64(0); lin < n; lin++ {
		gridCoord(c, lin, ext)
		inside := true
		off := int64(0)
		for k := range c {
			p[k] = box[k].Start + c[k]
			if p[k] < 0 || p[k] >= shape[k] {
				inside = false
			}
			off += p[k] * src.Strides[k]
		}
		dst := out[lin*int64(size):][:size]
		if inside && (missing == nil || !missing(p)) {
			copy(dst, data[off*int64(size):])
		} else {
			copy(dst, fill)
		}
	}
	return out
}
