package zarr

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
)

// Range is a half-open interval [Start, Stop) of element indices along one
// axis.
type Range struct{ Start, Stop int64 }

// Len returns Stop - Start.
func (r Range) Len() int64 { return r.Stop - r.Start }

// Plan says how to assemble one box of an array from stored chunks, without
// reading or decoding any chunk: which byte ranges to read (Chunks), and
// which part of each decoded chunk, or of the fill value, goes where in the
// box (Copies). It is plain data, so that a pipeline can run IO, decoding
// and assembly in separate stages, merge the plans of many boxes, and
// coalesce reads.
//
// The box buffer a plan fills holds Shape elements of DataType in C order,
// little-endian (bool as one byte 0 or 1, float16 as IEEE binary16 bits).
type Plan struct {
	Box      []Range  // the box, in array coordinates; it may reach outside the array
	Shape    []int64  // the box's extent along each axis
	DataType DataType // the array's data type
	Fill     []byte   // the fill value: one element, little-endian

	// Chunks lists the stored chunks the box needs, each once, sorted by
	// (Key, Offset). Within one store (Key, Offset) identifies a chunk, so
	// plans of several boxes can be merged by that pair.
	Chunks []Chunk

	// Copies tiles the box: every element of the box is written by exactly
	// one Copy. They are sorted by Chunk, fill copies (Chunk == -1) first.
	Copies []Copy
}

// Chunk is a stored chunk to read and decode: the Length bytes of object
// Key at Offset decode with Codec into Codec.Layout(). For a chunk inside a
// shard the range is the chunk's own bytes, the shard index already
// resolved.
type Chunk struct {
	Key    string
	Offset int64
	Length int64
	Origin []int64     // array coordinates of the chunk's element (0, 0, ...)
	Codec  *ChunkCodec // always a leaf chain (Codec.Leaf() is true)
}

// Payload returns the part of the stored bytes src of a chunk whose codec
// has a Simple Route that its compressor decodes: it verifies and strips the
// checksum codecs after the compressor. With CompressionNone the payload is
// the decoded chunk itself; with CompressionLZ4 it still starts with the
// 4-byte size prefix. It fails for chunks without a Simple route, and with
// a *FormatError when a checksum does not match.
func (ch *Chunk) Payload(src []byte) ([]byte, error) {
	c := ch.Codec
	if !c.Route().Simple {
		return nil, fmt.Errorf("zarr: %s: codec chain %s has no simple route", ch.Key, c)
	}
	for i := len(c.bytes) - 1; i >= 0; i-- {
		cc, ok := c.bytes[i].(*checksumCodec)
		if !ok {
			break
		}
		var err error
		if src, err = cc.strip(src); err != nil {
			return nil, &FormatError{Key: ch.Key, Offset: ch.Offset, Err: err}
		}
	}
	return src, nil
}

// Copy moves a block of Shape elements from Src in a decoded chunk (or
// from the fill value) to Dst in the box buffer.
type Copy struct {
	Chunk int     // index into Plan.Chunks, or -1 to write the fill value
	Src   []int64 // first element within the chunk; nil for fill copies
	Dst   []int64 // first element within the box
	Shape []int64 // extent of the block
}

// Bytes returns the size of the box buffer in bytes.
func (p *Plan) Bytes() int {
	n := p.DataType.Size()
	for _, s := range p.Shape {
		n *= int(s)
	}
	return n
}

// Locator answers the storage questions that planning asks: object sizes
// and shard indexes. A pipeline puts its caches behind it; NewLocator
// gives one that reads a Store directly.
type Locator interface {
	// Size returns the size of the object key, or an error wrapping
	// fs.ErrNotExist when it is absent (its chunk then reads as fill).
	Size(key string) (int64, error)
	// ShardIndex returns the index of the shard stored at shard, as
	// ReadShardIndex does: (nil, nil) when a whole-object shard is absent.
	ShardIndex(s *Sharding, shard Extent) (*ShardIndex, error)
}

// NewLocator returns a Locator that reads s on every call.
func NewLocator(s Store) Locator { return storeLocator{s} }

type storeLocator struct{ s Store }

func (l storeLocator) Size(key string) (int64, error) { return l.s.Size(key) }

func (l storeLocator) ShardIndex(s *Sharding, shard Extent) (*ShardIndex, error) {
	return ReadShardIndex(l.s, s, shard)
}

// Plan plans the read of box, one Range per axis (Start <= Stop; either
// may lie outside the array, where the box reads as the fill value). It
// reads object sizes and shard indexes through loc; a nil loc reads the
// array's store directly.
func (a *Array) Plan(box []Range, loc Locator) (*Plan, error) {
	info := a.info
	if len(box) != len(info.shape) {
		return nil, fmt.Errorf("zarr: %s: box has %d dimensions, the array has %d", a.metaKey, len(box), len(info.shape))
	}
	shape := make([]int64, len(box))
	for i, r := range box {
		if r.Start > r.Stop {
			return nil, fmt.Errorf("zarr: %s: box axis %d is [%d, %d): start after stop", a.metaKey, i, r.Start, r.Stop)
		}
		shape[i] = r.Stop - r.Start
	}
	if err := checkShape(shape, 0); err != nil {
		return nil, fmt.Errorf("zarr: %s: box %v: %w", a.metaKey, box, err)
	}
	if loc == nil {
		loc = NewLocator(a.store)
	}
	pl := &planner{a: a, loc: loc, box: box, plan: &Plan{
		Box: slices.Clone(box), Shape: shape, DataType: info.dtype, Fill: slices.Clone(info.fill),
	}}
	// Peel off the parts of the box outside the array, axis by axis, as
	// fill; what remains lies inside.
	in := slices.Clone(box)
	for k := range in {
		lo, hi := max(in[k].Start, 0), min(in[k].Stop, info.shape[k])
		if lo >= hi {
			pl.fill(in)
			return pl.finish(), nil
		}
		for _, out := range []Range{{in[k].Start, lo}, {hi, in[k].Stop}} {
			if out.Start < out.Stop {
				part := slices.Clone(in)
				part[k] = out
				pl.fill(part)
			}
		}
		in[k] = Range{lo, hi}
	}
	zero := make([]int64, len(box))
	err := forCells(in, zero, info.gridChunk, func(g, origin []int64, cell []Range) error {
		key := joinKey(a.path, info.keys.key(g))
		return pl.visit(info.codec, Extent{Key: key, Length: -1}, origin, cell)
	})
	if err != nil {
		return nil, err
	}
	return pl.finish(), nil
}

type planner struct {
	a    *Array
	loc  Locator
	box  []Range
	plan *Plan
}

// visit plans region (inside the chunk or shard at origin, stored at ext).
func (pl *planner) visit(c *ChunkCodec, ext Extent, origin []int64, region []Range) error {
	if c.Leaf() {
		if ext.Length < 0 {
			n, err := pl.loc.Size(ext.Key)
			if errors.Is(err, fs.ErrNotExist) {
				pl.fill(region)
				return nil
			}
			if err != nil {
				return err
			}
			ext.Length = n
		}
		pl.plan.Chunks = append(pl.plan.Chunks, Chunk{Key: ext.Key, Offset: ext.Offset, Length: ext.Length, Origin: slices.Clone(origin), Codec: c})
		src := make([]int64, len(region))
		for k, r := range region {
			src[k] = r.Start - origin[k]
		}
		pl.add(len(pl.plan.Chunks)-1, src, region)
		return nil
	}
	s := c.sharding
	idx, err := pl.loc.ShardIndex(s, ext)
	if err != nil {
		return err
	}
	if idx == nil {
		pl.fill(region)
		return nil
	}
	if int64(len(idx.Entries)) != s.n {
		return fmt.Errorf("zarr: %s: shard index has %d entries, want %d", ext.Key, len(idx.Entries), s.n)
	}
	return forCells(region, origin, s.chunkShape, func(g, cellOrigin []int64, cell []Range) error {
		lin := int64(0)
		for k := range g {
			lin = lin*s.grid[k] + g[k]
		}
		e := idx.Entries[lin]
		if e.Empty() {
			pl.fill(cell)
			return nil
		}
		return pl.visit(s.inner, Extent{Key: ext.Key, Offset: e.Offset, Length: e.Length}, cellOrigin, cell)
	})
}

// fill adds a fill copy over region (array coordinates).
func (pl *planner) fill(region []Range) {
	pl.add(-1, nil, region)
}

func (pl *planner) add(chunk int, src []int64, region []Range) {
	dst := make([]int64, len(region))
	ext := make([]int64, len(region))
	for k, r := range region {
		dst[k] = r.Start - pl.box[k].Start
		ext[k] = r.Len()
		if ext[k] == 0 {
			return
		}
	}
	pl.plan.Copies = append(pl.plan.Copies, Copy{Chunk: chunk, Src: src, Dst: dst, Shape: ext})
}

// finish sorts the chunks by (Key, Offset) and the copies by chunk.
func (pl *planner) finish() *Plan {
	p := pl.plan
	order := make([]int, len(p.Chunks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		a, b := &p.Chunks[x], &p.Chunks[y]
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Offset, b.Offset))
	})
	rank := make([]int, len(order)) // old index -> new index
	chunks := make([]Chunk, len(order))
	for n, o := range order {
		rank[o] = n
		chunks[n] = p.Chunks[o]
	}
	p.Chunks = chunks
	for i := range p.Copies {
		if c := &p.Copies[i]; c.Chunk >= 0 {
			c.Chunk = rank[c.Chunk]
		}
	}
	slices.SortStableFunc(p.Copies, func(a, b Copy) int { return cmp.Compare(a.Chunk, b.Chunk) })
	return p
}

// forCells calls f for every cell of the grid of cell shape cs anchored at
// origin that intersects region, with the cell's grid coordinate, its
// origin and its intersection with region. The slices are reused between
// calls.
func forCells(region []Range, origin, cs []int64, f func(g, cellOrigin []int64, cell []Range) error) error {
	rank := len(region)
	lo := make([]int64, rank)
	hi := make([]int64, rank)
	for k, r := range region {
		if r.Start >= r.Stop {
			return nil
		}
		lo[k] = (r.Start - origin[k]) / cs[k]
		hi[k] = (r.Stop - origin[k] + cs[k] - 1) / cs[k]
	}
	g := slices.Clone(lo)
	cellOrigin := make([]int64, rank)
	cell := make([]Range, rank)
	for {
		for k := range g {
			cellOrigin[k] = origin[k] + g[k]*cs[k]
			cell[k] = Range{max(region[k].Start, cellOrigin[k]), min(region[k].Stop, cellOrigin[k]+cs[k])}
		}
		if err := f(g, cellOrigin, cell); err != nil {
			return err
		}
		k := rank - 1
		for ; k >= 0; k-- {
			g[k]++
			if g[k] < hi[k] {
				break
			}
			g[k] = lo[k]
		}
		if k < 0 {
			return nil
		}
	}
}

// CopyChunk writes the block op selects from the decoded chunk (as
// Decoder.Decode left it) into the box buffer region, which must be
// p.Bytes() long, converting to little-endian.
func (p *Plan) CopyChunk(region []byte, op Copy, decoded []byte) error {
	if op.Chunk < 0 || op.Chunk >= len(p.Chunks) {
		return fmt.Errorf("zarr: copy names chunk %d of %d", op.Chunk, len(p.Chunks))
	}
	l := p.Chunks[op.Chunk].Codec.layout
	if len(decoded) < l.Bytes() {
		return fmt.Errorf("zarr: decoded chunk of %d bytes, its layout needs %d", len(decoded), l.Bytes())
	}
	if err := p.checkCopy(region, op, op.Src, l.Shape); err != nil {
		return err
	}
	copyBlock(region, cLayout(p.Shape, p.DataType), op.Dst, decoded, l, op.Src, op.Shape)
	return nil
}

// FillCopy writes the fill value over op's block of the box buffer region.
func (p *Plan) FillCopy(region []byte, op Copy) error {
	if err := p.checkCopy(region, op, nil, nil); err != nil {
		return err
	}
	fillBlock(region, cLayout(p.Shape, p.DataType), op.Dst, op.Shape, p.Fill)
	return nil
}

// checkCopy checks op's blocks against the box (and the chunk shape when
// src is set), so that a malformed Copy is an error, not a panic.
func (p *Plan) checkCopy(region []byte, op Copy, src, chunkShape []int64) error {
	if len(region) != p.Bytes() {
		return fmt.Errorf("zarr: box buffer of %d bytes, want %d", len(region), p.Bytes())
	}
	rank := len(p.Shape)
	if len(op.Dst) != rank || len(op.Shape) != rank || (chunkShape != nil && len(src) != rank) {
		return fmt.Errorf("zarr: copy of rank %d/%d/%d for a box of rank %d", len(op.Dst), len(op.Shape), len(src), rank)
	}
	for k := range rank {
		if op.Shape[k] < 0 || op.Dst[k] < 0 || op.Dst[k] > p.Shape[k]-op.Shape[k] ||
			chunkShape != nil && (src[k] < 0 || src[k] > chunkShape[k]-op.Shape[k]) {
			return fmt.Errorf("zarr: copy %v+%v (from %v) out of bounds", op.Dst, op.Shape, src)
		}
	}
	return nil
}
