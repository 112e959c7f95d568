package zarr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
)

func init() {
	registerCodec("sharding_indexed", parseSharding)
}

// Sharding is a parsed sharding_indexed codec: a shard holds a grid of
// inner chunks, each encoded with the inner chain, and an index of where
// each one's bytes are.
type Sharding struct {
	shape        []int64 // the shard shape the codec sees
	chunkShape   []int64 // inner chunk shape
	grid         []int64 // inner chunks per shard along each axis
	n            int64   // inner chunks per shard
	indexAtStart bool
	indexEndian  Endian
	indexChecks  []*checksumCodec // index codecs after bytes, in chain order
	indexBytes   int64
	inner        *ChunkCodec
}

func (s *Sharding) codecName() string { return "sharding_indexed" }

// ChunkShape returns the inner chunk shape.
func (s *Sharding) ChunkShape() []int64 { return slices.Clone(s.chunkShape) }

// GridShape returns the number of inner chunks along each axis of a shard.
func (s *Sharding) GridShape() []int64 { return slices.Clone(s.grid) }

// Inner returns the codec chain of the inner chunks.
func (s *Sharding) Inner() *ChunkCodec { return s.inner }

// IndexAtStart reports whether the index precedes the chunks (index_location
// "start") rather than following them ("end", the default).
func (s *Sharding) IndexAtStart() bool { return s.indexAtStart }

// IndexBytes returns the size of the encoded index: 16 bytes per inner
// chunk plus 4 per checksum codec.
func (s *Sharding) IndexBytes() int64 { return s.indexBytes }

func parseSharding(spec codecSpec, in chunkSpec) (codec, error) {
	var cfg struct {
		ChunkShape    []int64     `json:"chunk_shape"`
		Codecs        []Extension `json:"codecs"`
		IndexCodecs   []Extension `json:"index_codecs"`
		IndexLocation *string     `json:"index_location"`
	}
	if err := parseConfig(spec, &cfg); err != nil {
		return nil, err
	}
	field := spec.field + ".configuration"
	rank := len(in.shape)
	if len(cfg.ChunkShape) != rank {
		return nil, metaErr("", field+".chunk_shape", malformed("chunk_shape has %d dimensions, the shard has %d", len(cfg.ChunkShape), rank))
	}
	s := &Sharding{shape: slices.Clone(in.shape), chunkShape: cfg.ChunkShape, grid: make([]int64, rank), n: 1}
	for i, c := range cfg.ChunkShape {
		if c < 1 || in.shape[i]%c != 0 {
			return nil, metaErr("", field+".chunk_shape", malformed("inner chunk_shape %v does not divide the shard shape %v", cfg.ChunkShape, in.shape))
		}
		s.grid[i] = in.shape[i] / c
		s.n *= s.grid[i] // no overflow: the product is at most the shard's element count
	}
	if s.n > (math.MaxInt64-64)/16 {
		return nil, metaErr("", field+".chunk_shape", unsupported("%d inner chunks per shard", s.n))
	}
	switch {
	case cfg.IndexLocation == nil || *cfg.IndexLocation == "end":
	case *cfg.IndexLocation == "start":
		s.indexAtStart = true
	default:
		return nil, metaErr("", field+".index_location", malformed("index_location %q is neither \"start\" nor \"end\"", *cfg.IndexLocation))
	}
	if cfg.Codecs == nil {
		return nil, metaErr("", field+".codecs", malformed("codecs is missing"))
	}
	inner := make([]codecSpec, len(cfg.Codecs))
	for i, c := range cfg.Codecs {
		inner[i] = codecSpec{name: c.Name, config: c.Configuration, field: fmt.Sprintf("%s.codecs[%d]", field, i)}
	}
	var err error
	if s.inner, err = parseChain(inner, cfg.ChunkShape, in.dtype, in.fill); err != nil {
		return nil, err
	}

	if cfg.IndexCodecs == nil {
		return nil, metaErr("", field+".index_codecs", malformed("index_codecs is missing"))
	}
	idxShape := append(slices.Clone(s.grid), 2)
	haveBytes := false
	for i, c := range cfg.IndexCodecs {
		f := fmt.Sprintf("%s.index_codecs[%d]", field, i)
		p, ok := codecRegistry[c.Name]
		if !ok {
			return nil, metaErr("", f, unsupported("codec %q", c.Name))
		}
		cd, err := p(codecSpec{name: c.Name, config: c.Configuration, field: f}, chunkSpec{shape: idxShape, dtype: Uint64})
		if err != nil {
			return nil, metaErr("", f, err)
		}
		switch cd := cd.(type) {
		case *endianCodec:
			if haveBytes || i != 0 {
				return nil, metaErr("", f, unsupported("index codec chain %s", extNames(cfg.IndexCodecs)))
			}
			haveBytes = true
			s.indexEndian = cd.endian
		case *checksumCodec:
			if !haveBytes {
				return nil, metaErr("", f, unsupported("index codec chain %s", extNames(cfg.IndexCodecs)))
			}
			s.indexChecks = append(s.indexChecks, cd)
		default:
			return nil, metaErr("", f, unsupported("index codec %q (the index must be bytes, then checksums)", c.Name))
		}
	}
	if !haveBytes {
		return nil, metaErr("", field+".index_codecs", malformed("index_codecs has no bytes codec"))
	}
	s.indexBytes = 16*s.n + 4*int64(len(s.indexChecks))
	return s, nil
}

func extNames(exts []Extension) []string {
	names := make([]string, len(exts))
	for i, e := range exts {
		names[i] = e.Name
	}
	return names
}

// Extent names stored bytes: Length bytes of the object Key from Offset.
// A Length of -1 means "the whole object, size not yet known".
type Extent struct {
	Key    string
	Offset int64
	Length int64
}

// ShardIndex is a parsed shard index.
type ShardIndex struct {
	// Entries holds one entry per inner chunk, in C order over the shard's
	// GridShape.
	Entries []IndexEntry
}

// IndexEntry locates one inner chunk's stored bytes.
type IndexEntry struct {
	Offset int64 // byte offset within the object (not the shard); -1 for an empty chunk
	Length int64 // stored bytes; 0 for an empty chunk
}

// Empty reports whether the chunk is absent (reads as the fill value).
func (e IndexEntry) Empty() bool { return e.Offset < 0 }

// IndexOffset returns where the index of a shard of length bytes starts,
// relative to the shard's first byte. It fails with a *FormatError if the
// shard is shorter than its index.
func (s *Sharding) IndexOffset(shard Extent) (int64, error) {
	if shard.Length < s.indexBytes {
		return 0, &FormatError{Key: shard.Key, Offset: shard.Offset, Err: malformed("shard of %d bytes is shorter than its index (%d bytes)", shard.Length, s.indexBytes)}
	}
	if s.indexAtStart {
		return 0, nil
	}
	return shard.Length - s.indexBytes, nil
}

const sentinel = math.MaxUint64

// ParseIndex parses the encoded index b (IndexBytes long) of the shard
// stored at shard, which must have a known Length. It verifies the
// index's checksums and checks that every entry is either empty (offset and
// length both 2^64-1) or lies within the shard. Failures are
// *FormatErrors naming the shard's key.
func (s *Sharding) ParseIndex(shard Extent, b []byte) (*ShardIndex, error) {
	at, err := s.IndexOffset(shard)
	if err != nil {
		return nil, err
	}
	at += shard.Offset
	fail := func(off int64, err error) (*ShardIndex, error) {
		return nil, &FormatError{Key: shard.Key, Offset: off, Err: err}
	}
	if int64(len(b)) != s.indexBytes {
		return fail(at, malformed("shard index of %d bytes, want %d", len(b), s.indexBytes))
	}
	for i := len(s.indexChecks) - 1; i >= 0; i-- {
		c := s.indexChecks[i]
		if b, err = c.strip(b); err != nil {
			return fail(at, fmt.Errorf("shard index: %w", err))
		}
		if c.atStart {
			at += 4
		}
	}
	var order binary.ByteOrder = binary.LittleEndian
	if s.indexEndian == BigEndian {
		order = binary.BigEndian
	}
	idx := &ShardIndex{Entries: make([]IndexEntry, s.n)}
	for i := range idx.Entries {
		off := order.Uint64(b[16*i:])
		n := order.Uint64(b[16*i+8:])
		switch {
		case off == sentinel && n == sentinel:
			idx.Entries[i] = IndexEntry{Offset: -1}
			continue
		case off == sentinel || n == sentinel:
			return fail(at+16*int64(i), malformed("shard index entry %d is half empty (offset %#x, length %#x)", i, off, n))
		case off > uint64(shard.Length) || n > uint64(shard.Length)-off:
			return fail(at+16*int64(i), malformed("shard index entry %d: %d bytes at offset %d lie past the end of the %d-byte shard", i, n, off, shard.Length))
		}
		idx.Entries[i] = IndexEntry{Offset: shard.Offset + int64(off), Length: int64(n)}
	}
	return idx, nil
}

// ReadShardIndex reads and parses the index of the shard stored at shard.
// When shard.Length is -1 the whole object is the shard, and an absent
// object gives (nil, nil): every chunk of a missing shard is fill.
//
// A store that implements TailReader reads the index at the end of a
// whole-object shard with one ReadTail, learning the shard's size with it,
// when the index is at most maxMetadataBytes (the buffer is allocated
// before the object's size is known; a larger index is checked against
// the size first).
func ReadShardIndex(st Store, s *Sharding, shard Extent) (*ShardIndex, error) {
	if tr, ok := st.(TailReader); ok && shard.Length < 0 && !s.indexAtStart && s.indexBytes <= maxMetadataBytes {
		b := make([]byte, s.indexBytes)
		n, err := tr.ReadTail(shard.Key, b)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		shard.Offset, shard.Length = 0, n
		if _, err := s.IndexOffset(shard); err != nil {
			return nil, err
		}
		return s.ParseIndex(shard, b)
	}
	if shard.Length < 0 {
		n, err := st.Size(shard.Key)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		shard.Offset, shard.Length = 0, n
	}
	off, err := s.IndexOffset(shard)
	if err != nil {
		return nil, err
	}
	b := make([]byte, s.indexBytes) // at most shard.Length, checked by IndexOffset
	n, err := st.ReadAt(shard.Key, b, shard.Offset+off)
	if n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, &FormatError{Key: shard.Key, Offset: shard.Offset + off, Err: malformed("shard truncated: read %d of %d index bytes", n, len(b))}
		}
		return nil, err
	}
	return s.ParseIndex(shard, b)
}
