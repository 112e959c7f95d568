package ptx

import "testing"

// TestSrcRange checks SrcRange's counting (hostOp.below) against a count
// by enumeration: for random boxes in random C-order chunks of rank 1 to
// 4, and every [lo, hi) of a sample of chunk element ranges, the box
// elements whose chunk index lies in [lo, hi) are exactly [start,
// start+n) in the box's C order; and a chunk in another order is refused.
func TestSrcRange(t *testing.T) {
	rng := newRand(t)
	for range 300 {
		rank := 1 + rng.IntN(4)
		op := Op{SrcDtype: Uint16}
		elems, size := int64(1), int64(1)
		for d := rank - 1; d >= 0; d-- {
			op.SrcShape[d] = uint32(1 + rng.IntN(6))
			op.SrcStride[d] = uint32(size)
			size *= int64(op.SrcShape[d])
			op.Extent[d] = uint32(1 + rng.IntN(int(op.SrcShape[d])))
			op.SrcStart[d] = uint32(rng.IntN(int(op.SrcShape[d] - op.Extent[d] + 1)))
			elems *= int64(op.Extent[d])
		}
		h := hostOp{op: &op, rank: rank, elems: elems, chunk: make([]byte, 2*size)}
		a := HostAssembly{ops: []hostOp{h}}
		// idx[k] is the chunk index of box element k (C order).
		idx := make([]int64, elems)
		for k := range idx {
			rem, lin := int64(k), int64(0)
			for d := rank - 1; d >= 0; d-- {
				e := int64(op.Extent[d])
				lin += (int64(op.SrcStart[d]) + rem%e) * int64(op.SrcStride[d])
				rem /= e
			}
			idx[k] = lin
		}
		for range 20 {
			lo := rng.Int64N(size + 1)
			hi := lo + rng.Int64N(size-lo+1)
			start, n, ok := a.SrcRange(0, lo, hi)
			if !ok {
				t.Fatalf("%+v: a C-order chunk refused", op)
			}
			for k, lin := range idx {
				in := lin >= lo && lin < hi
				if got := int64(k) >= start && int64(k) < start+n; got != in {
					t.Fatalf("shape %v box %v at %v, [%d, %d): range [%d, %d) has element %d (chunk %d): %v, want %v",
						op.SrcShape[:rank], op.Extent[:rank], op.SrcStart[:rank], lo, hi, start, start+n, k, lin, got, in)
				}
			}
		}
	}
	if _, _, ok := (&HostAssembly{ops: []hostOp{{op: &Op{}, rank: 1, elems: 4}}}).SrcRange(0, 0, 4); ok {
		t.Error("a fill op has a source range")
	}
	f := Op{SrcDtype: Uint16, SrcShape: [MaxRank]uint32{3, 4}, SrcStride: [MaxRank]uint32{1, 3}, Extent: [MaxRank]uint32{2, 2}}
	if _, _, ok := (&HostAssembly{ops: []hostOp{{op: &f, rank: 2, elems: 4, chunk: make([]byte, 24)}}}).SrcRange(0, 0, 12); ok {
		t.Error("a chunk in F order has a source range")
	}
}
