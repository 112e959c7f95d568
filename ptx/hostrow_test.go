package ptx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// rowSources are the source types with row loops (see rowFuncOf).
var rowSources = []Dtype{Uint8, Uint16, Int16, Uint32, Int32, Float32}

// useGeneric makes every op of a run element at a time through the
// generic path (fetch, castRow, the intensity map, writeRow; intRow): the
// reference that the row loops are tested against.
func (a *HostAssembly) useGeneric() {
	for i := range a.ops {
		a.ops[i].row = nil
	}
}

// randomIntensity returns random intensity map parameters, often extreme:
// zero and negative zero, subnormal and huge scales (overflow to Inf,
// Inf times 0 is NaN), infinite and zero clips, empty clip ranges.
func randomIntensity(rng *rand.Rand) (scale, offset, lo, hi float32) {
	pick := func(specials ...float32) float32 {
		return specials[rng.IntN(len(specials))]
	}
	normal := func(mag float64) float32 {
		return float32(rng.NormFloat64() * mag)
	}
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	scale = normal(math.Pow(10, float64(rng.IntN(7)-4)))
	if rng.IntN(3) == 0 {
		scale = pick(0, negZero, 1, -1, 1e-40, -1e-44, 3e38, -3e38, 1.0/65535)
	}
	offset = normal(10)
	if rng.IntN(3) == 0 {
		offset = pick(0, negZero, 0.5, -3e38, 3e38)
	}
	lo, hi = pick(-inf, 0, negZero, normal(1), normal(100)), pick(inf, 0, negZero, normal(1), normal(100))
	if rng.IntN(4) == 0 {
		lo, hi = -inf, inf
	}
	if lo > hi {
		lo, hi = hi, lo
	}
	return scale, offset, lo, hi
}

// TestHostRowsMatchGeneric runs scenarios of every source type with row
// loops (and a few without) into every output type, each source type in
// samples of every combination of flips of the last two axes and their
// swap, with random flips of the others and, for float outputs, random
// intensity maps, through the row loops in parts of random lengths in a
// random order, some from a copy of the source bytes, and compares the
// output, the misfit status and its error with those of the generic path.
func TestHostRowsMatchGeneric(t *testing.T) {
	rng := newRand(t)
	for _, out := range allOutputs {
		for rank := 1; rank <= 4; rank++ {
			t.Run(fmt.Sprintf("%v/rank%d", out, rank), func(t *testing.T) {
				shape := randomShape(rng, rank)
				if rank == 1 {
					shape[0] = 1 + rng.IntN(300)
				}
				if rank > 1 {
					shape[rank-1] = shape[rank-2]
				}
				var specs []chunkSpec
				for _, d := range rowSources {
					for range 8 {
						specs = append(specs, chunkSpec{d, false, NoShuffle})
					}
				}
				specs = append(specs, chunkSpec{Uint16, true, NoShuffle}, chunkSpec{Uint16, false, ByteShuffle},
					chunkSpec{Float64, false, NoShuffle}, chunkSpec{Bool, false, NoShuffle})
				sc, err := newScenario(rng, out, shape, specs)
				if err != nil {
					t.Fatal(err)
				}
				for s := range specs {
					tf := Identity()
					for d := range rank - 2 {
						if rng.IntN(2) == 0 {
							tf = must(tf.Flip(d))
						}
					}
					if s&1 != 0 {
						tf = must(tf.Flip(rank - 1))
					}
					if rank > 1 && s&2 != 0 {
						tf = must(tf.Flip(rank - 2))
					}
					if rank > 1 && s&4 != 0 {
						perm := upTo(rank)
						perm[rank-2], perm[rank-1] = rank-1, rank-2
						tf = must(tf.Permute(perm))
					}
					if !out.IsInteger() && rng.IntN(3) != 0 {
						tf = must(tf.WithIntensity(randomIntensity(rng)))
					}
					if err := sc.plan.SetTransform(s, tf); err != nil {
						t.Fatal(err)
					}
				}
				compareGeneric(t, rng, sc)
			})
		}
	}
}

// compareGeneric runs the ops of sc in parts of random lengths, in a
// random order, some from a copy of their source bytes, and the same ops
// through the generic path, and compares the outputs and misfits. Every
// op of a source type with a row loop must have one.
func compareGeneric(t *testing.T, rng *rand.Rand, sc *scenario) {
	t.Helper()
	l, ops, ts := sc.layout, sc.plan.Ops(), sc.plan.Transforms()
	got, want := poisoned(l.Bytes()), poisoned(l.Bytes())
	a, err := NewHostAssembly(got, l, sc.arena, ops, ts)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := NewHostAssembly(want, l, sc.arena, ops, ts)
	if err != nil {
		t.Fatal(err)
	}
	ref.useGeneric()
	type part struct {
		op       int32
		start, n int64
	}
	var parts []part
	for i := range ops {
		op := &ops[i]
		fast := op.SrcDtype != 0 && op.Shuffle == NoShuffle && !op.BigEndian &&
			(op.SrcDtype != Float32 || !l.Dtype.IsInteger())
		for _, d := range rowSources {
			if fast && op.SrcDtype == d && a.ops[i].row == nil {
				t.Fatalf("op %d (%v into %v) has no row loop", i, d, l.Dtype)
			}
		}
		elems := a.Elems(int32(i))
		for start := int64(0); start < elems; {
			n := min(elems-start, 1+rng.Int64N(max(elems/2, 1)))
			parts = append(parts, part{int32(i), start, n})
			start += n
		}
	}
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	sc1 := NewHostScratch()
	for _, p := range parts {
		var base int64
		var from []byte
		if op := &ops[p.op]; op.SrcDtype != 0 && rng.IntN(3) == 0 {
			base = op.SrcOffset
			from = append([]byte(nil), sc.arena[base:base+srcBytes(op, len(l.Shape))]...)
		}
		if err := a.RunPart(p.op, p.start, p.n, base, from, sc1); err != nil {
			t.Fatal(err)
		}
	}
	all := make([]int32, len(ops))
	for i := range all {
		all[i] = int32(i)
	}
	if err := ref.Run(all, 0, nil, sc1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		size := l.Dtype.Size()
		for i := 0; i < len(got); i += size {
			if !bytes.Equal(got[i:i+size], want[i:i+size]) {
				s := i / size / int(l.SampleElems())
				tf := Identity()
				if ts != nil {
					tf = ts[s]
				}
				t.Fatalf("shape %v, element %d (sample %d, %v, transform %+v) = %x, generic path %x",
					l.Shape, i/size, s, sc.specs[s], tf, got[i:i+size], want[i:i+size])
			}
		}
	}
	gm, wm := a.Misfits(), ref.Misfits()
	if gm != wm {
		t.Errorf("misfits %+v; generic path %+v", gm, wm)
	}
	if g, w := gm.Err(l), wm.Err(l); !reflect.DeepEqual(g, w) {
		t.Errorf("misfit error %v; generic path %v", g, w)
	}
	if l.Dtype.IsInteger() {
		t.Logf("%d elements, %d misfits", l.Samples*int(l.SampleElems()), wm.Count)
	}
}

// FuzzAssembleHost feeds arbitrary op bytes, with an output type and a
// transform (flips, a swap of the two axes, an intensity map) of every
// sample, to AssembleHost: it must either refuse them with an *OpError or
// execute them without a panic, and then write what the generic path
// writes, reporting the same misfits.
func FuzzAssembleHost(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	sc, err := newScenario(rng, BFloat16, []int{6, 6}, allSpecs())
	if err != nil {
		f.Fatal(err)
	}
	for i, op := range sc.plan.Ops() {
		f.Add(OpBytes([]Op{op}), uint8(i), uint8(i), float32(0.5), float32(-3))
	}
	f.Fuzz(func(t *testing.T, b []byte, out, xf uint8, scale, offset float32) {
		var op Op
		if len(b) != len(OpBytes([]Op{op})) {
			return
		}
		copy(OpBytes([]Op{op}), b)
		op.BigEndian = b[191]&1 != 0 // keep the bool valid
		l := sc.layout
		l.Dtype = allOutputs[int(out)%len(allOutputs)]
		tf := Identity()
		for axis := range 2 {
			if xf>>axis&1 != 0 {
				tf = must(tf.Flip(axis))
			}
		}
		if xf&4 != 0 {
			tf = must(tf.Permute([]int{1, 0}))
		}
		if xf&8 != 0 && !l.Dtype.IsInteger() {
			if m, err := tf.WithIntensity(scale, offset, -1, float32(xf>>4)); err == nil {
				tf = m
			}
		}
		ts := make([]Transform, l.Samples)
		for s := range ts {
			ts[s] = tf
		}
		got := make([]byte, l.Bytes())
		err := AssembleHost(got, l, sc.arena, []Op{op}, ts, 1)
		var opErr *OpError
		var misfit *MisfitError
		if errors.As(err, &opErr) {
			return
		}
		if err != nil && !errors.As(err, &misfit) {
			t.Fatalf("error %v is neither an *OpError nor a *MisfitError", err)
		}
		want := make([]byte, l.Bytes())
		a, err2 := NewHostAssembly(want, l, sc.arena, []Op{op}, ts)
		if err2 != nil {
			t.Fatal(err2)
		}
		a.useGeneric()
		if err := a.Run([]int32{0}, 0, nil, NewHostScratch()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%v output, transform %+v: %x; generic path %x", l.Dtype, tf, got, want)
		}
		st := a.Misfits()
		if wantErr := st.Err(l); !reflect.DeepEqual(err, wantErr) {
			t.Errorf("error %v; generic path %v", err, wantErr)
		}
	})
}

// BenchmarkAssembleHostTraining measures the host twin on batches shaped
// like the training scenario's: 8 boxes of 128^3 (the image with a
// leading channel axis of 1) at random offsets in a grid of 64^3 chunks,
// each sample with random flips of z, y and x and, for every other
// sample, a quarter turn in y-x; the image a uint16 source into bfloat16
// with a normalisation, the labels uint8 into uint8 and uint16 into uint8
// (which needs the range check).
func BenchmarkAssembleHostTraining(b *testing.B) {
	for _, tt := range []struct {
		name     string
		src, out Dtype
		channel  bool
	}{
		{"image-u16-bf16", Uint16, BFloat16, true},
		{"label-u8-u8", Uint8, Uint8, false},
		{"label-u16-u8", Uint16, Uint8, false},
	} {
		b.Run(tt.name, func(b *testing.B) {
			l, arena, plan := trainingBatch(b, tt.src, tt.out, tt.channel)
			out := make([]byte, l.Bytes())
			b.SetBytes(l.Bytes())
			for b.Loop() {
				if err := AssembleHost(out, l, arena, plan.Ops(), plan.Transforms(), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// trainingBatch builds 8 samples of 128^3 boxes of src (with a leading
// axis of 1 when channel is set), each at a random offset in a grid of
// 64^3 chunks, with the training scenario's transforms (see
// BenchmarkAssembleHostTraining). The ops read a few distinct chunks of
// random values, as a decoder's scratch chunks stay in the cache.
func trainingBatch(tb testing.TB, src, out Dtype, channel bool) (Layout, []byte, *Plan) {
	rng := rand.New(rand.NewPCG(5, 6))
	box, chunk := []int{128, 128, 128}, []int{64, 64, 64}
	if channel {
		box, chunk = append([]int{1}, box...), append([]int{1}, chunk...)
	}
	rank := len(box)
	l := Layout{Samples: 8, Shape: box, Dtype: out}
	plan, err := NewPlan(l)
	if err != nil {
		tb.Fatal(err)
	}
	const distinct = 4
	size := src.Size()
	n := 64 * 64 * 64 * size
	arena := make([]byte, distinct*n)
	for i := 0; i < len(arena); i += size {
		switch src {
		case Uint8:
			if rng.IntN(20) == 0 {
				arena[i] = byte(1 + rng.IntN(3))
			}
		case Uint16:
			v := rng.IntN(4096)
			if out == Uint8 {
				v = rng.IntN(256)
			}
			binary.LittleEndian.PutUint16(arena[i:], uint16(v))
		default:
			tb.Fatalf("no training data of %v", src)
		}
	}
	use := 0
	for s := range l.Samples {
		origin := make([]int, rank)
		cells := make([]int, rank)
		for d := range rank {
			if box[d] > 1 {
				origin[d] = rng.IntN(64)
			}
			cells[d] = (origin[d]+box[d]-1)/chunk[d] + 1
		}
		for cell := range boxPoints(cells) {
			start, ext, srcStart := make([]int, rank), make([]int, rank), make([]int, rank)
			empty := false
			for d := range rank {
				c := cell[d] * chunk[d]
				lo, hi := max(c, origin[d]), min(c+chunk[d], origin[d]+box[d])
				start[d], ext[d], srcStart[d] = lo-origin[d], hi-lo, lo-c
				empty = empty || hi <= lo
			}
			if empty {
				continue
			}
			source := Source{Offset: int64(use%distinct) * int64(n), Dtype: src, Shape: chunk}
			use++
			if err := plan.Copy(s, start, ext, &source, srcStart); err != nil {
				tb.Fatal(err)
			}
		}
		tf := Identity()
		for d := rank - 3; d < rank; d++ {
			if rng.IntN(2) == 0 {
				tf = must(tf.Flip(d))
			}
		}
		if s%2 == 1 {
			tf = must(tf.Rot90(1, rank-2, rank-1))
		}
		if !out.IsInteger() {
			tf = must(tf.Normalize(16384, 21000, -5, 5))
		}
		if err := plan.SetTransform(s, tf); err != nil {
			tb.Fatal(err)
		}
	}
	if testing.Verbose() {
		tb.Logf("%v -> %v: %d ops", src, out, len(plan.Ops()))
	}
	return l, arena, plan
}
