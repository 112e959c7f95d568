package ptx

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"unsafe"
)

// poison is the byte every output is set to before an assemble; no
// expected element is made of it (see newValue), so an element that no op
// writes shows up as a mismatch.
const poison = 0xff

// A chunkSpec says how the chunks of one sample of a scenario are stored.
type chunkSpec struct {
	dtype     Dtype
	bigEndian bool
	shuffle   Shuffle
}

func (s chunkSpec) String() string {
	e := "le"
	if s.bigEndian {
		e = "be"
	}
	return fmt.Sprintf("%v/%s/%v", s.dtype, e, s.shuffle)
}

// allSpecs returns every source dtype x byte order x shuffle mode.
func allSpecs() []chunkSpec {
	var specs []chunkSpec
	for d := Bool; d <= Float64; d++ {
		for _, be := range []bool{false, true} {
			for _, sh := range []Shuffle{NoShuffle, ByteShuffle, BitShuffle} {
				specs = append(specs, chunkSpec{d, be, sh})
			}
		}
	}
	return specs
}

// A scenario is a batch to assemble, with the expected result computed
// directly from the chunks' logical values (not through op addressing).
type scenario struct {
	layout Layout
	plan   *Plan
	arena  []byte
	elems  []srcElem // what each element of the batch holds, untransformed
	want   []byte    // expected output without transforms, host byte order
	specs  []chunkSpec
}

// A srcElem is what one element of a batch is made from: a source value
// (its type and value bits) or, with dtype 0, a fill op's Op.Fill.
type srcElem struct {
	dtype Dtype
	v     uint64
}

// float32Bits returns the element as float32 bits.
func (e srcElem) float32Bits() uint32 {
	if e.dtype == 0 {
		return uint32(e.v)
	}
	return Float32Bits(e.dtype, e.v)
}

// intBits returns the element's bits in integer output type out and
// whether it fits.
func (e srcElem) intBits(out Dtype) (uint64, bool) {
	if e.dtype == 0 {
		b, _ := IntBits(out, Int32, e.v) // the fill's value, sign-extended
		return b, true
	}
	return IntBits(out, e.dtype, e.v)
}

// sampleOf returns the sample that output byte offset off belongs to.
func (sc *scenario) sampleOf(off int) int {
	return off / (int(sc.layout.SampleElems()) * sc.layout.Dtype.Size())
}

// newScenario builds a batch with one sample per spec. Each sample is a box
// at a random offset in an array whose chunk grid (random chunk shape) cuts
// it anywhere, and which may end inside the box. Every grid cell inside the
// array is a missing chunk (a fill op) or a chunk stored per the sample's
// spec, in C order, F order or a random transpose, shuffled with random
// blosc geometry, at a random aligned place in the arena; the parts of the
// box outside the array are fill ops.
func newScenario(rng *rand.Rand, out Dtype, shape []int, specs []chunkSpec) (*scenario, error) {
	l := Layout{Samples: len(specs), Shape: shape, Dtype: out}
	plan, err := NewPlan(l)
	if err != nil {
		return nil, err
	}
	sc := &scenario{layout: l, plan: plan, specs: specs}
	rank := len(shape)
	sampleElems := int(l.SampleElems())
	want := make([]srcElem, l.Samples*sampleElems)
	ostride := CStrides(shape)
	for s, spec := range specs {
		chunk := make([]int, rank)  // chunk shape
		origin := make([]int, rank) // the box's start in the array
		array := make([]int, rank)  // the array's shape
		for d := range rank {
			chunk[d] = 1 + rng.IntN(shape[d]+2)
			origin[d] = rng.IntN(chunk[d] + 2)
			array[d] = origin[d] + shape[d]
			if rng.IntN(4) == 0 {
				array[d] -= rng.IntN(shape[d] + 1) // the box reaches outside
			}
		}
		fill := newFill(rng)
		if out.IsInteger() {
			fill = newIntFill(rng, out)
		}
		// Grid cells covering the box.
		lo, n := make([]int, rank), make([]int, rank)
		for d := range rank {
			lo[d] = origin[d] / chunk[d]
			n[d] = (origin[d]+shape[d]-1)/chunk[d] - lo[d] + 1
		}
		for cell := range boxPoints(n) {
			// The cell's part of the box, in array coordinates, and the part
			// of that inside the array.
			start, end, inEnd := make([]int, rank), make([]int, rank), make([]int, rank)
			empty := false
			for d := range rank {
				c := (lo[d] + cell[d]) * chunk[d]
				start[d] = max(c, origin[d])
				end[d] = min(c+chunk[d], origin[d]+shape[d])
				inEnd[d] = min(end[d], max(array[d], start[d]))
				empty = empty || inEnd[d] == start[d]
			}
			// Outside the array: the box minus its inside part, as slabs.
			for d := range rank {
				if inEnd[d] == end[d] {
					continue
				}
				slabStart, slabExt := make([]int, rank), make([]int, rank)
				for e := range rank {
					switch {
					case e < d:
						slabStart[e], slabExt[e] = start[e], inEnd[e]-start[e]
					case e == d:
						slabStart[e], slabExt[e] = inEnd[e], end[e]-inEnd[e]
					default:
						slabStart[e], slabExt[e] = start[e], end[e]-start[e]
					}
				}
				if err := sc.addFill(s, origin, slabStart, slabExt, fill, want, ostride); err != nil {
					return nil, err
				}
			}
			if empty {
				continue
			}
			ext := make([]int, rank)
			for d := range rank {
				ext[d] = inEnd[d] - start[d]
			}
			if rng.IntN(5) == 0 {
				if err := sc.addFill(s, origin, start, ext, fill, want, ostride); err != nil {
					return nil, err
				}
				continue
			}
			chunkStart := make([]int, rank)
			for d := range rank {
				chunkStart[d] = (lo[d] + cell[d]) * chunk[d]
			}
			if err := sc.addChunk(rng, s, spec, chunk, chunkStart, origin, start, ext, want, ostride); err != nil {
				return nil, err
			}
		}
	}
	sc.elems = want
	sc.want = encodeElems(want, out, nil)
	return sc, nil
}

func (sc *scenario) addFill(sample int, origin, start, ext []int, fill uint32, want []srcElem, ostride []int) error {
	dst := make([]int, len(start))
	for d := range start {
		dst[d] = start[d] - origin[d]
	}
	if err := sc.plan.Fill(sample, dst, ext, fill); err != nil {
		return err
	}
	base := sample * int(sc.layout.SampleElems())
	for p := range boxPoints(ext) {
		at := base
		for d := range p {
			at += (dst[d] + p[d]) * ostride[d]
		}
		want[at] = srcElem{0, uint64(fill)}
	}
	return nil
}

// addChunk stores a chunk of random values whose grid cell starts at
// chunkStart (array coordinates), and copies its part [start, start+ext).
func (sc *scenario) addChunk(rng *rand.Rand, sample int, spec chunkSpec, shape, chunkStart, origin, start, ext []int, want []srcElem, ostride []int) error {
	rank := len(shape)
	size := spec.dtype.Size()
	nelem := 1
	for _, x := range shape {
		nelem *= x
	}
	values := make([]uint64, nelem) // logical C order
	for i := range values {
		if out := sc.layout.Dtype; out.IsInteger() {
			values[i] = newIntValue(rng, spec.dtype, out)
		} else {
			values[i] = newValue(rng, spec.dtype)
		}
	}
	var strides []int
	switch rng.IntN(3) {
	case 0:
		strides = CStrides(shape)
	case 1:
		strides = FStrides(shape)
	default:
		var err error
		if strides, err = TransposeStrides(shape, rng.Perm(rank)); err != nil {
			return err
		}
	}
	stored := make([]byte, nelem*size)
	cstrides := CStrides(shape)
	for p := range boxPoints(shape) {
		logical, at := 0, 0
		for d := range p {
			logical += p[d] * cstrides[d]
			at += p[d] * strides[d]
		}
		putValue(stored[at*size:(at+1)*size], values[logical], spec.bigEndian)
	}
	src := Source{Dtype: spec.dtype, BigEndian: spec.bigEndian, Shape: shape, Strides: strides, Shuffle: spec.shuffle}
	if spec.shuffle != NoShuffle {
		src.TypeSize, src.BlockSize = bloscGeometry(rng, size, len(stored))
		stored = shuffleBlosc(stored, src.TypeSize, src.BlockSize, spec.shuffle)
	}
	// Random bytes before the chunk, then the chunk at an aligned offset.
	sc.arena = appendRandom(rng, sc.arena, rng.IntN(24))
	for len(sc.arena)%8 != 0 {
		sc.arena = append(sc.arena, byte(rng.Uint32()))
	}
	src.Offset = int64(len(sc.arena))
	sc.arena = append(sc.arena, stored...)

	dst, srcStart := make([]int, rank), make([]int, rank)
	for d := range rank {
		dst[d] = start[d] - origin[d]
		srcStart[d] = start[d] - chunkStart[d]
	}
	if err := sc.plan.Copy(sample, dst, ext, &src, srcStart); err != nil {
		return err
	}
	base := sample * int(sc.layout.SampleElems())
	for p := range boxPoints(ext) {
		at, logical := base, 0
		for d := range p {
			at += (dst[d] + p[d]) * ostride[d]
			logical += (srcStart[d] + p[d]) * cstrides[d]
		}
		want[at] = srcElem{spec.dtype, values[logical]}
	}
	return nil
}

// bloscGeometry picks a blosc typesize and blocksize for a chunk of nbytes
// bytes of items of the given size: usually what blosc itself would use
// (typesize = item size, blocksize a multiple of it, often of 8 items so
// that bit shuffle applies, with a short last block), sometimes a typesize
// or blocksize that does not match the items.
func bloscGeometry(rng *rand.Rand, size, nbytes int) (typeSize, blockSize int) {
	typeSize = size
	if rng.IntN(4) == 0 {
		typeSize = 1 + rng.IntN(2*size+1)
	}
	units := max(1, nbytes/typeSize)
	switch rng.IntN(5) {
	case 0, 1:
		blockSize = typeSize * 8 * (1 + rng.IntN(max(1, units/8)))
	case 2, 3:
		blockSize = typeSize * (1 + rng.IntN(units))
	default:
		blockSize = 1 + rng.IntN(nbytes+8)
	}
	return typeSize, blockSize
}

// shuffleBlosc applies blosc's shuffle filter to data, block by block as
// c-blosc does (the short last block included), following the layouts of
// the blosc1 format: byte shuffle puts byte j of unit i of a block of n
// typesize units at j*n + i; bit shuffle, for blocks whose unit count is a
// multiple of 8, puts bit b of byte j of unit i at bit i%8 of byte i/8 of
// row 8j+b, each row n/8 bytes long. Bytes after the last whole unit, and
// blocks bit shuffle does not apply to, are copied as they are.
func shuffleBlosc(data []byte, typeSize, blockSize int, mode Shuffle) []byte {
	out := make([]byte, len(data))
	for start := 0; start < len(data); start += blockSize {
		block := data[start:min(start+blockSize, len(data))]
		dst := out[start : start+len(block)]
		copy(dst, block)
		n := len(block) / typeSize
		switch mode {
		case ByteShuffle:
			for j := range typeSize {
				for i := range n {
					dst[j*n+i] = block[i*typeSize+j]
				}
			}
		case BitShuffle:
			if n%8 != 0 {
				continue
			}
			clear(dst[:n*typeSize])
			for j := range typeSize {
				for b := range 8 {
					row := dst[(8*j+b)*(n/8):]
					for i := range n {
						row[i/8] |= (block[i*typeSize+j] >> b & 1) << (i % 8)
					}
				}
			}
		}
	}
	return out
}

// newValue returns random value bits of type d (see Float32Bits), biased
// towards the values casts get wrong: special floats, subnormals, large
// integers. It never returns a value whose float32 bits are all ones
// (the poisoned output).
func newValue(rng *rand.Rand, d Dtype) uint64 {
	for {
		var v uint64
		switch d {
		case Bool:
			v = uint64(rng.IntN(2))
			if rng.IntN(16) == 0 {
				v = rng.Uint64() // any non-zero byte is true
			}
		case Float32:
			v = uint64(rng.Uint32())
			switch rng.IntN(8) {
			case 0:
				v = uint64(math.Float32bits(float32(rng.NormFloat64())))
			case 1:
				v &= 0x807fffff // zero or subnormal
			case 2:
				v |= 0x7f800000 // Inf or NaN
			}
		case Float64:
			v = rng.Uint64()
			switch rng.IntN(6) {
			case 0, 1:
				v = math.Float64bits(rng.NormFloat64() * math.Ldexp(1, rng.IntN(300)-150))
			case 2:
				v |= 0x7ff0000000000000 // Inf or NaN
			case 3:
				v = v&(1<<63|1<<52-1) | uint64(1023-127-23+rng.IntN(30))<<52 // float32 subnormals
			}
		default:
			v = rng.Uint64()
			if rng.IntN(2) == 0 {
				v = uint64(rng.IntN(1000)) - 500
			}
		}
		if d.Size() < 8 {
			v &= 1<<(8*d.Size()) - 1
		}
		if Float32Bits(d, v) != poison*0x01010101 {
			return v
		}
	}
}

// newIntValue returns value bits of type d for a batch of integer output
// type out: mostly values that fit, often the edges of out's and d's
// ranges and the values just past them, and now and then anything
// (newValue), so that every kind of misfit occurs.
func newIntValue(rng *rand.Rand, d, out Dtype) uint64 {
	if rng.IntN(6) == 0 {
		return newValue(rng, d)
	}
	lo, hi := intRange(out)
	var x int64
	switch rng.IntN(4) {
	case 0:
		edges := []int64{lo, hi, 0, 1, -1}
		if lo > math.MinInt64 {
			edges = append(edges, lo-1)
		}
		if hi < math.MaxInt64 {
			edges = append(edges, hi+1)
		}
		x = edges[rng.IntN(len(edges))]
	case 1:
		x = lo + rng.Int64N(1000)
		if hi-lo >= 0 && hi-lo < 1000 { // not Int64, whose span overflows
			x = lo + rng.Int64N(hi-lo+1)
		}
	default:
		x = rng.Int64N(100) - 20
	}
	switch d {
	case Bool:
		return uint64(x & 1)
	case Float16:
		return uint64(halfOf(float32(x)))
	case Float32:
		return uint64(math.Float32bits(float32(x)))
	case Float64:
		return math.Float64bits(float64(x))
	}
	dlo, dhi := intRange(d)
	x = min(max(x, dlo), dhi) // d's own edges
	if d.Size() < 8 {
		return uint64(x) & (1<<(8*d.Size()) - 1)
	}
	return uint64(x)
}

// halfOf returns the float16 bits of f rounded towards zero (an integer
// stays an integer), Inf beyond float16's range.
func halfOf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	if b&0x7fffffff == 0 {
		return sign
	}
	exp := int(b>>23&0xff) - 127 + 15
	switch {
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		return sign // below 2^-14: no integer but 0 lives there
	}
	return sign | uint16(exp)<<10 | uint16(b>>13&0x3ff)
}

// newIntFill returns an Op.Fill for integer output type out: a value of
// its range, often an edge (within int32 for Int64).
func newIntFill(rng *rand.Rand, out Dtype) uint32 {
	lo, hi := intRange(out)
	if out == Int64 {
		lo, hi = math.MinInt32, math.MaxInt32
	}
	x := lo + rng.Int64N(min(hi-lo, 1000)+1)
	if rng.IntN(3) == 0 {
		x = []int64{lo, hi, 0}[rng.IntN(3)]
	}
	fill, err := FillFor(out, Int64, uint64(x))
	if err != nil {
		panic(err)
	}
	return fill
}

// newFill returns random float32 bits for a fill value, never all ones.
func newFill(rng *rand.Rand) uint32 {
	for {
		f := rng.Uint32()
		if rng.IntN(2) == 0 {
			f = math.Float32bits(float32(rng.NormFloat64()))
		}
		if f != poison*0x01010101 {
			return f
		}
	}
}

// putValue stores the low len(b) bytes of v into b in the given byte order.
func putValue(b []byte, v uint64, bigEndian bool) {
	for j := range b {
		if bigEndian {
			b[len(b)-1-j] = byte(v >> (8 * j))
		} else {
			b[j] = byte(v >> (8 * j))
		}
	}
}

func appendRandom(rng *rand.Rand, b []byte, n int) []byte {
	for range n {
		b = append(b, byte(rng.Uint32()))
	}
	return b
}

// encodeElems returns the output elements of type out that elems become,
// each through the intensity map of its sample's transform in ts (nil:
// none).
func encodeElems(elems []srcElem, out Dtype, ts []Transform) []byte {
	b := make([]byte, len(elems)*out.Size())
	per := len(elems)
	if len(ts) > 0 {
		per = len(elems) / len(ts)
	}
	e := binary.NativeEndian
	for i, x := range elems {
		if out.IsInteger() {
			v, _ := x.intBits(out)
			putValue(b[i*out.Size():(i+1)*out.Size()], v, !littleEndianHost())
			continue
		}
		f := x.float32Bits()
		if len(ts) > 0 && ts[i/per].Intensity {
			f = ts[i/per].mapBits(f)
		}
		if out == BFloat16 {
			e.PutUint16(b[2*i:], BFloat16Bits(f))
		} else {
			e.PutUint32(b[4*i:], f)
		}
	}
	return b
}

// expectedBytes converts float32 bits to the output type's bytes.
func expectedBytes(bits []uint32, out Dtype) []byte {
	if out == BFloat16 {
		b := make([]byte, 2*len(bits))
		for i, x := range bits {
			binary.NativeEndian.PutUint16(b[2*i:], BFloat16Bits(x))
		}
		return b
	}
	b := make([]byte, 4*len(bits))
	for i, x := range bits {
		binary.NativeEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// boxPoints yields every point of a box of the given extents, in C order.
// The yielded slice is reused.
func boxPoints(ext []int) func(yield func([]int) bool) {
	return func(yield func([]int) bool) {
		for _, x := range ext {
			if x == 0 {
				return
			}
		}
		p := make([]int, len(ext))
		for {
			if !yield(p) {
				return
			}
			d := len(ext) - 1
			for d >= 0 {
				p[d]++
				if p[d] < ext[d] {
					break
				}
				p[d] = 0
				d--
			}
			if d < 0 {
				return
			}
		}
	}
}

// u32Bytes views a []uint32 as bytes.
func u32Bytes(v []uint32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// firstDiff describes the first differing element of two outputs.
func firstDiff(sc *scenario, got []byte) string {
	size := sc.layout.Dtype.Size()
	bad := 0
	first := -1
	for i := 0; i < len(got); i += size {
		if string(got[i:i+size]) != string(sc.want[i:i+size]) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if first < 0 {
		return ""
	}
	return fmt.Sprintf("%d elements differ; first: element %d (sample %d, %v) = %x, want %x",
		bad, first/size, sc.sampleOf(first), sc.specs[sc.sampleOf(first)], got[first:first+size], sc.want[first:first+size])
}
