package zarr

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// codecSpec is one codec of a chain as the metadata names it.
type codecSpec struct {
	name   string
	config json.RawMessage // nil when absent
	field  string          // JSON path of the codec, for errors
	v2     bool            // a zarr v2 numcodecs object: flat, with "id"
}

// chunkSpec is what a codec sees at its position in the chain.
type chunkSpec struct {
	shape []int64 // the array shape entering the codec
	dtype DataType
	fill  []byte
}

// codec is a parsed codec. Its concrete type says its kind:
// *transposeCodec (array to array), *endianCodec or *Sharding (array to
// bytes), or a bytesToBytes.
type codec interface {
	codecName() string
}

// bytesToBytes is a codec that transforms bytes.
type bytesToBytes interface {
	codec
	// decode undoes the codec: it writes the decoded form of src to dst
	// and returns its length. If the output does not fit in dst it returns
	// errShortDst (dst is then garbage); any other error is a reason.
	decode(d *Decoder, dst, src []byte) (int, error)
	// compression says which compressor this is, if any.
	compression() Compression
}

// codecParser parses one codec's configuration.
type codecParser func(spec codecSpec, in chunkSpec) (codec, error)

// codecRegistry maps codec names to parsers. It is filled by init
// functions and read-only afterwards. Zarr v2 compressors and filters are
// looked up as "numcodecs." + their id.
var codecRegistry = map[string]codecParser{}

// registerCodec adds a codec parser; registering a name twice is a
// programming error.
func registerCodec(name string, p codecParser) {
	if _, dup := codecRegistry[name]; dup {
		panic("zarr: codec " + name + " registered twice")
	}
	codecRegistry[name] = p
}

// Compression names the compressor of a chunk's bytes-to-bytes codecs, so
// that a pipeline can send chunks to a matching GPU decoder.
type Compression uint8

// Compressors.
const (
	CompressionNone  Compression = iota // no compressor
	CompressionZstd                     // one or more standard zstd frames (RFC 8878)
	CompressionLZ4                      // numcodecs lz4: a 4-byte little-endian decoded size, then one raw LZ4 block
	CompressionBlosc                    // one blosc1 chunk
	CompressionGzip                     // gzip (RFC 1952)
	CompressionZlib                     // zlib (RFC 1950)
)

var compressionNames = [...]string{"none", "zstd", "lz4", "blosc", "gzip", "zlib"}

// String returns the compressor's name.
func (c Compression) String() string {
	if int(c) < len(compressionNames) {
		return compressionNames[c]
	}
	return fmt.Sprintf("Compression(%d)", int(c))
}

// Layout describes a decoded chunk in memory, as Decoder.Decode leaves it:
// element (i0, i1, ...) of the chunk, in the array's axis order, starts at
// byte (i0*Strides[0] + i1*Strides[1] + ...) * DataType.Size() and is
// stored in byte order Endian. Strides are in elements. A chunk decoded
// through a transpose codec (or a zarr v2 array in order F) has strides
// that are not C order; a GPU gather kernel can read it directly.
type Layout struct {
	Shape    []int64 // the chunk shape
	Strides  []int64 // element strides per axis
	DataType DataType
	Endian   Endian
}

// Bytes returns the size of the decoded chunk in bytes.
func (l Layout) Bytes() int {
	n := l.DataType.Size()
	for _, s := range l.Shape {
		n *= int(s)
	}
	return n
}

// ChunkCodec is a parsed codec chain: how the stored bytes of one chunk
// (or one shard) become its elements. It is immutable and shared by all the
// chunks of one array at one level of sharding.
type ChunkCodec struct {
	layout   Layout
	perm     []int          // composed transpose: encoded axis i is logical axis perm[i]
	sharding *Sharding      // non-nil when the array-to-bytes codec is sharding_indexed
	bytes    []bytesToBytes // in chain (encoding) order
	names    []string       // every codec's name in chain order
	fill     []byte
	size     int // layout.Bytes()
}

// Layout returns the layout of a chunk decoded with this chain.
func (c *ChunkCodec) Layout() Layout {
	l := c.layout
	l.Shape = slices.Clone(l.Shape)
	l.Strides = slices.Clone(l.Strides)
	return l
}

// Names returns the codec names of the chain, in chain (encoding) order.
func (c *ChunkCodec) Names() []string { return slices.Clone(c.names) }

// String returns the chain as "transpose -> bytes -> zstd".
func (c *ChunkCodec) String() string { return strings.Join(c.names, " -> ") }

// Sharding returns the chain's sharding codec when its array-to-bytes codec
// is sharding_indexed, or nil.
func (c *ChunkCodec) Sharding() *Sharding { return c.sharding }

// Leaf reports whether a chunk with this codec is decoded as one unit.
// It is false only for a shard that Plan resolves through its index: a
// chain that is exactly [sharding_indexed], with no transpose before it and
// no bytes-to-bytes codec after it. Any other chain, including a sharding
// codec wrapped in other codecs, is a leaf that Decoder.Decode decodes
// whole.
func (c *ChunkCodec) Leaf() bool {
	return c.sharding == nil || c.perm != nil || len(c.bytes) > 0
}

// Route summarises a leaf chain's bytes-to-bytes stage for GPU decoders.
type Route struct {
	// Simple is true when the chain's bytes-to-bytes codecs are at most one
	// compressor followed only by checksum codecs, and the array-to-bytes
	// codec is bytes: Chunk.Payload then yields bytes that one call of the
	// compressor decodes straight into Layout.
	Simple bool
	// Compression is the compressor when Simple, else CompressionNone.
	Compression Compression
}

// Route returns the chain's route.
func (c *ChunkCodec) Route() Route {
	if c.sharding != nil {
		return Route{}
	}
	r := Route{Simple: true}
	for i, b := range c.bytes {
		if _, ok := b.(*checksumCodec); ok {
			continue
		}
		if i != 0 {
			return Route{}
		}
		r.Compression = b.compression()
	}
	return r
}

// parseChain parses a codec list for chunks of the given shape. Every codec
// must be understood, whatever its must_understand says: skipping a codec
// would return wrong data.
func parseChain(specs []codecSpec, shape []int64, dt DataType, fill []byte) (*ChunkCodec, error) {
	rank := len(shape)
	c := &ChunkCodec{fill: fill}
	cur := slices.Clone(shape)
	var perm []int
	haveAB := false
	for _, spec := range specs {
		p, ok := codecRegistry[spec.name]
		if !ok {
			name := strings.TrimPrefix(spec.name, "numcodecs.")
			if spec.v2 {
				return nil, metaErr("", spec.field, unsupported("codec %q", name))
			}
			return nil, metaErr("", spec.field, unsupported("codec %q", spec.name))
		}
		cd, err := p(spec, chunkSpec{shape: cur, dtype: dt, fill: fill})
		if err != nil {
			if me, ok := err.(*MetadataError); ok {
				return nil, me
			}
			return nil, metaErr("", spec.field, err)
		}
		c.names = append(c.names, cd.codecName())
		switch cd := cd.(type) {
		case *transposeCodec:
			if haveAB {
				return nil, metaErr("", spec.field, malformed("array-to-array codec %q after the array-to-bytes codec", spec.name))
			}
			if perm == nil {
				perm = make([]int, rank)
				for i := range perm {
					perm[i] = i
				}
			}
			next := make([]int, rank)
			for i, o := range cd.order {
				next[i] = perm[o]
			}
			perm = next
			for i := range cur {
				cur[i] = shape[perm[i]]
			}
		case *endianCodec, *Sharding:
			if haveAB {
				return nil, metaErr("", spec.field, malformed("a second array-to-bytes codec %q", spec.name))
			}
			haveAB = true
			if sh, ok := cd.(*Sharding); ok {
				c.sharding = sh
				c.layout.Endian = LittleEndian
			} else {
				c.layout.Endian = cd.(*endianCodec).endian
			}
		case bytesToBytes:
			if !haveAB {
				return nil, metaErr("", spec.field, malformed("bytes-to-bytes codec %q before the array-to-bytes codec", spec.name))
			}
			c.bytes = append(c.bytes, cd)
		}
	}
	if !haveAB {
		return nil, metaErr("", "codecs", malformed("no array-to-bytes codec"))
	}
	if isIdentity(perm) {
		perm = nil
	}
	c.perm = perm
	// Encoded strides are C order over the transposed shape cur; logical
	// axis perm[i] has the stride of encoded axis i.
	strides := make([]int64, rank)
	s := int64(1)
	for i := rank - 1; i >= 0; i-- {
		ax := i
		if perm != nil {
			ax = perm[i]
		}
		strides[ax] = s
		s *= cur[i]
	}
	c.layout.Shape = slices.Clone(shape)
	c.layout.Strides = strides
	c.layout.DataType = dt
	elems := s
	if elems > math.MaxInt/int64(dt.Size()) {
		return nil, metaErr("", "codecs", unsupported("chunk of %d elements of %s (too large)", elems, dt))
	}
	c.size = int(elems) * dt.Size()
	return c, nil
}

func isIdentity(p []int) bool {
	for i, v := range p {
		if i != v {
			return false
		}
	}
	return true
}

// parseConfig decodes a codec configuration: strictly for zarr v3 codecs,
// leniently for numcodecs ones.
func parseConfig(spec codecSpec, v any) error {
	if spec.v2 || strings.HasPrefix(spec.name, "numcodecs.") {
		if err := decodeLenient(spec.config, v); err != nil {
			return jsonReason(err)
		}
		return nil
	}
	if err := decodeStrict(spec.config, v); err != nil {
		return jsonReason(err)
	}
	return nil
}
