package writer

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Limits on what the writer accepts. Chunks are encoded in memory and the
// compressed chunks of a shard are held until it is written, so these bound
// the memory of each writing goroutine.
const (
	maxRank       = 32
	maxChunkBytes = 1 << 30
	maxShardBytes = 1 << 36
	// maxChunksPerShard bounds a shard index to 256 MiB.
	maxChunksPerShard = 1 << 24
)

// layout is a validated Spec, resolved into what encoding needs.
type layout struct {
	spec       Spec // normalized: Format, Order and Separator filled in
	ti         typeInfo
	sharded    bool
	block      []int64 // shape of a block: ShardShape, or ChunkShape when unsharded
	inner      []int64 // chunks per block in each dimension (all 1 when unsharded)
	grid       []int64 // blocks in each dimension
	nblocks    int
	chunkBytes int    // the size of one chunk
	fill       uint64 // the fill value's bit pattern
	fillChunk  []byte // a chunk of fill values
	attrs      json.RawMessage
}

func specErr(field, format string, args ...any) error {
	return &SpecError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// resolve validates s and computes its layout.
func (s Spec) resolve() (*layout, error) {
	s.Shape = slices.Clone(s.Shape)
	s.ChunkShape = slices.Clone(s.ChunkShape)
	s.ShardShape = slices.Clone(s.ShardShape)
	s.DimensionNames = slices.Clone(s.DimensionNames)
	if s.Format == 0 {
		s.Format = 3
	}
	if s.Format != 2 && s.Format != 3 {
		return nil, specErr("Spec.Format", "must be 2 or 3, not %d", s.Format)
	}
	l := &layout{}
	var ok bool
	if l.ti, ok = infoOf(s.DataType); !ok {
		return nil, specErr("Spec.DataType", "unknown data type %d", uint8(s.DataType))
	}
	rank := len(s.Shape)
	if rank < 1 || rank > maxRank {
		return nil, specErr("Spec.Shape", "has %d dimensions; want 1 to %d", rank, maxRank)
	}
	if err := checkShape("Spec.Shape", s.Shape, rank, l.ti.size, math.MaxInt64); err != nil {
		return nil, err
	}
	if err := checkShape("Spec.ChunkShape", s.ChunkShape, rank, l.ti.size, maxChunkBytes); err != nil {
		return nil, err
	}
	l.chunkBytes = int(product(s.ChunkShape)) * l.ti.size
	l.block = s.ChunkShape
	l.inner = ones(rank)
	if len(s.ShardShape) > 0 {
		if s.Format != 3 {
			return nil, specErr("Spec.ShardShape", "sharding needs Format 3")
		}
		if err := checkShape("Spec.ShardShape", s.ShardShape, rank, l.ti.size, maxShardBytes); err != nil {
			return nil, err
		}
		for i, n := range s.ShardShape {
			if n%s.ChunkShape[i] != 0 {
				return nil, specErr("Spec.ShardShape", "dimension %d is %d, not a multiple of ChunkShape's %d", i, n, s.ChunkShape[i])
			}
			l.inner[i] = n / s.ChunkShape[i]
		}
		if n := product(l.inner); n > maxChunksPerShard {
			return nil, specErr("Spec.ShardShape", "holds %d chunks; the most is %d", n, maxChunksPerShard)
		}
		l.sharded = true
		l.block = s.ShardShape
	} else {
		s.ShardShape = nil
		if s.IndexAtStart {
			return nil, specErr("Spec.IndexAtStart", "applies to sharded arrays only (ShardShape is nil)")
		}
	}
	l.grid = make([]int64, rank)
	nblocks := int64(1)
	for i := range rank {
		l.grid[i] = ceilDiv(s.Shape[i], l.block[i])
		if nblocks > math.MaxInt/l.grid[i] {
			return nil, specErr("Spec.Shape", "has more than %d blocks", math.MaxInt)
		}
		nblocks *= l.grid[i]
	}
	l.nblocks = int(nblocks)

	switch s.Order {
	case 0:
		s.Order = 'C'
	case 'C', 'F':
	default:
		return nil, specErr("Spec.Order", "must be 'C' or 'F', not %q", s.Order)
	}
	if err := s.Compression.check(s.Format); err != nil {
		return nil, err
	}
	fill, why := s.Fill.pattern(l.ti)
	if why != "" {
		return nil, specErr("Spec.Fill", "%s for %v", why, s.DataType)
	}
	l.fill = fill
	l.fillChunk = make([]byte, l.chunkBytes)
	for i := 0; i < l.chunkBytes; i += l.ti.size {
		store(l.fillChunk[i:], l.ti.size, fill)
	}
	if s.Format == 2 && l.ti.kind == kindFloat && isNaN(l.ti, fill) && fill != l.ti.canonicalNaN() {
		return nil, specErr("Spec.Fill", "format 2 can store only the canonical NaN, not %#x", fill)
	}
	if s.V2Keys && s.Format != 3 {
		return nil, specErr("Spec.V2Keys", "applies to Format 3 only; format 2 keys are always v2 keys")
	}
	switch s.Separator {
	case "":
		s.Separator = "/"
		if s.V2Keys || s.Format == 2 {
			s.Separator = "."
		}
	case "/", ".":
	default:
		return nil, specErr("Spec.Separator", `must be "/" or ".", not %q`, s.Separator)
	}
	if s.DimensionNames != nil {
		if s.Format != 3 {
			return nil, specErr("Spec.DimensionNames", "need Format 3 (format 2 keeps them in attributes, e.g. _ARRAY_DIMENSIONS)")
		}
		if len(s.DimensionNames) != rank {
			return nil, specErr("Spec.DimensionNames", "has %d names; Shape has %d dimensions", len(s.DimensionNames), rank)
		}
	}
	if s.Attributes != nil {
		b, err := marshal(s.Attributes)
		if err != nil {
			return nil, specErr("Spec.Attributes", "%v", err)
		}
		l.attrs = b
	}
	l.spec = s
	return l, nil
}

// checkShape checks that shape has rank positive extents whose product,
// times size, is at most limit bytes.
func checkShape(field string, shape []int64, rank, size int, limit int64) error {
	if len(shape) != rank {
		return specErr(field, "has %d dimensions; Shape has %d", len(shape), rank)
	}
	bytes := int64(size)
	for i, n := range shape {
		if n < 1 {
			return specErr(field, "dimension %d is %d; every extent must be at least 1", i, n)
		}
		if bytes > limit/n {
			return specErr(field, "holds more than %d bytes", limit)
		}
		bytes *= n
	}
	return nil
}

// check validates c for the given zarr format.
func (c Compression) check(format int) error {
	notFor := func(field string) error {
		return specErr("Spec.Compression."+field, "does not apply to %v", c.Codec)
	}
	if c.Codec != Zstd && c.Checksum {
		return notFor("Checksum")
	}
	if c.Codec != Blosc {
		var zero Compression
		switch {
		case c.BloscCompressor != zero.BloscCompressor:
			return notFor("BloscCompressor")
		case c.Shuffle != zero.Shuffle:
			return notFor("Shuffle")
		case c.Blocksize != 0:
			return notFor("Blocksize")
		}
	}
	level := func(lo, hi int) error {
		if c.Level < lo || c.Level > hi {
			return specErr("Spec.Compression.Level", "%v level %d is outside %d..%d", c.Codec, c.Level, lo, hi)
		}
		return nil
	}
	switch c.Codec {
	case NoCompression:
		if c.Level != 0 {
			return notFor("Level")
		}
		return nil
	case Zstd:
		return level(-131072, 22)
	case Gzip:
		return level(0, 9)
	case Zlib:
		if format != 2 {
			return specErr("Spec.Compression.Codec", "zlib needs Format 2; format 3 has gzip")
		}
		return level(0, 9)
	case LZ4:
		return level(0, math.MaxInt32)
	case Blosc:
		if err := level(0, 9); err != nil {
			return err
		}
		return c.checkBlosc()
	}
	return specErr("Spec.Compression.Codec", "unknown codec %v", c.Codec)
}

func isNaN(ti typeInfo, bits uint64) bool {
	exp := ti.mask() >> 1 &^ (1<<ti.mant - 1)
	return bits&exp == exp && bits&(1<<ti.mant-1) != 0
}

func product(s []int64) int64 {
	p := int64(1)
	for _, n := range s {
		p *= n
	}
	return p
}

func ones(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// ceilDiv returns ⌈a/b⌉ for a, b ≥ 1, without overflow.
func ceilDiv(a, b int64) int64 { return (a-1)/b + 1 }
