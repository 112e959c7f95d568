package pipeline

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// randomPlan is a batch plan of n jobs over a few shard files, routed the
// CUDA engine's way (some decoded on the CPU into the slab), each used by
// one to three copies, and some fill copies.
func randomPlan(rng *rand.Rand, srcs []*source, n int) *batchPlan {
	bp := &batchPlan{}
	for i := range n {
		size := int64(1+rng.IntN(8)) << 10
		j := &job{src: srcs[rng.IntN(len(srcs))], layout: zarr.Layout{Shape: []int64{size / 2}, DataType: zarr.Uint16},
			chunk: zarr.Chunk{Key: fmt.Sprint("c/", rng.IntN(3)), Offset: int64(i) << 14, Length: 1 + rng.Int64N(size)}}
		j.gpu = rng.IntN(4) > 0
		if j.gpu {
			j.slabCost, j.arenaCost = j.chunk.Length+jobDescBytes+statusBytes, size
		} else {
			j.decInSlab = true
			j.slabCost = j.chunk.Length + align(size)
		}
		bp.jobs = append(bp.jobs, j)
		for range 1 + rng.IntN(3) {
			bp.copies = append(bp.copies, plan.Copy{Job: i, Shape: []int64{1 + rng.Int64N(64), 8}})
		}
	}
	for range rng.IntN(4) {
		bp.copies = append(bp.copies, plan.Copy{Job: -1, Shape: []int64{4, 4}})
	}
	return bp
}

// A batch's first wave joins the previous batch's last one (carry) where
// it fits: it starts where carry ends in the slab and the arena, the two
// together stay within every limit, and nothing of either overlaps. A
// carry too full for even the batch's fills is not joined.
func TestCutWavesCarry(t *testing.T) {
	rng := rand.New(rand.NewPCG(zarrtest.Seed(t), 7))
	srcs := []*source{{uri: "a"}, {uri: "b"}}
	lim := waveLimits{slab: 256 << 10, arena: 192 << 10, jobs: 40, ops: 90, opCost: opBytes, elems: 9000, readCap: 64 << 10, readGap: 2 << 10}
	joined := 0
	for round := range 400 {
		a, b := randomPlan(rng, srcs, 1+rng.IntN(120)), randomPlan(rng, srcs, 1+rng.IntN(120))
		if err := a.cutWaves(&batchState{}, lim, nil); err != nil {
			t.Fatal(err)
		}
		carry := a.waves[len(a.waves)-1]
		if err := b.cutWaves(&batchState{}, lim, carry); err != nil {
			t.Fatal(err)
		}
		for _, bp := range []*batchPlan{a, b} {
			seen := make([]int, len(bp.jobs))
			for i, w := range bp.waves {
				if w.index != i || w.last != (i == len(bp.waves)-1) {
					t.Fatalf("round %d: wave %d has index %d, last %v", round, i, w.index, w.last)
				}
				for _, ji := range w.jobs {
					seen[ji]++
				}
			}
			for ji, n := range seen {
				if n != 1 {
					t.Fatalf("round %d: job %d in %d waves", round, ji, n)
				}
			}
		}
		w0 := b.waves[0]
		for i, w := range b.waves[1:] {
			if w.carried || w.slabAt != 0 || w.arenaAt != 0 {
				t.Fatalf("round %d: wave %d of the batch is carried", round, i+1)
			}
		}
		group := []*wave{carry}
		if w0.carried {
			joined++
			if w0.slabAt != carry.slabEnd || w0.arenaAt != carry.arena {
				t.Fatalf("round %d: carried wave starts at %d/%d, carry ends at %d/%d", round, w0.slabAt, w0.arenaAt, carry.slabEnd, carry.arena)
			}
			group = append(group, w0)
		} else if len(carry.jobs) < lim.jobs-1 && carry.slab+2*(16<<10) < lim.slab && carry.arena+(8<<10) <= lim.arena && carry.elems+1600 < lim.elems {
			t.Fatalf("round %d: room after carry (%d slab, %d arena, %d jobs, %d elems), but the next batch did not join it", round, carry.slab, carry.arena, len(carry.jobs), carry.elems)
		}
		jobsOf := func(w *wave) []*job {
			bp := b
			if w.batch == carry.batch {
				bp = a
			}
			var js []*job
			for _, ji := range w.jobs {
				js = append(js, bp.jobs[ji])
			}
			return js
		}
		checkGroup(t, round, group, jobsOf, lim)
		for _, w := range b.waves[1:] {
			checkGroup(t, round, []*wave{w}, jobsOf, lim)
		}
	}
	if joined == 0 {
		t.Fatal("no batch joined the previous batch's last wave")
	}
}

// checkGroup checks the waves sharing one slab: within the limits, each
// starting where the one before ends, no two jobs' bytes overlapping.
func checkGroup(t *testing.T, round int, g []*wave, jobsOf func(*wave) []*job, lim waveLimits) {
	t.Helper()
	type span struct{ from, to int64 }
	var slab, arena []span
	jobs := 0
	end := int64(0) // what prepare and layOut add past the parts' chunks: nvCOMP's arguments, ops and block tables
	for _, w := range g {
		jobs += len(w.jobs)
		end += int64(w.ops) * opBytes
		for _, r := range w.reads {
			if r.slabOff < w.slabAt || r.slabOff+r.length > w.slabEnd {
				t.Fatalf("round %d: read [%d, %d) outside its wave's [%d, %d)", round, r.slabOff, r.slabOff+r.length, w.slabAt, w.slabEnd)
			}
			slab = append(slab, span{r.slabOff, r.slabOff + r.length})
		}
		for _, j := range jobsOf(w) {
			n := int64(j.layout.Bytes())
			if j.decInSlab {
				if j.decOff < w.slabAt || j.decOff+n > w.slabEnd {
					t.Fatalf("round %d: slab-decoded chunk [%d, %d) outside its wave's [%d, %d)", round, j.decOff, j.decOff+n, w.slabAt, w.slabEnd)
				}
				slab = append(slab, span{j.decOff, j.decOff + n})
				continue
			}
			end += jobDescBytes + statusBytes
			if j.decOff < w.arenaAt || j.decOff+j.arenaCost > w.arena {
				t.Fatalf("round %d: decoded chunk [%d, %d) outside its wave's arena [%d, %d)", round, j.decOff, j.decOff+j.arenaCost, w.arenaAt, w.arena)
			}
			arena = append(arena, span{j.decOff, j.decOff + j.arenaCost})
		}
	}
	for _, spans := range [][]span{slab, arena} {
		for i, x := range spans {
			for _, y := range spans[i+1:] {
				if x.from < y.to && y.from < x.to {
					t.Fatalf("round %d: [%d, %d) and [%d, %d) overlap", round, x.from, x.to, y.from, y.to)
				}
			}
		}
	}
	last := g[len(g)-1]
	if last.slab > lim.slab || last.arena > lim.arena || jobs > lim.jobs || last.elems > lim.elems {
		t.Fatalf("round %d: %d waves use %d of %d slab, %d of %d arena, %d of %d jobs, %d of %d elems", round, len(g),
			last.slab, lim.slab, last.arena, lim.arena, jobs, lim.jobs, last.elems, lim.elems)
	}
	if end += last.slabEnd; end > lim.slab {
		t.Fatalf("round %d: %d staging bytes for %d waves, the limit is %d", round, end, len(g), lim.slab)
	}
}

// A raw chunk the CUDA engine reads in place (rawInPlace) joins the read
// before it only where its slab offset stays aligned to its elements: of
// float64 chunks 4 bytes apart, each starts a read of its own; chunks
// with room for a decoded copy, and aligned raw ones, share one read.
func TestRouteRawChunkAlignedInPlace(t *testing.T) {
	src := &source{uri: "a", dtype: ptx.Float64}
	lim := waveLimits{slab: 1 << 20, arena: 1 << 20, jobs: 64, readCap: 64 << 10, readGap: 4 << 10}
	for _, tc := range []struct {
		name      string
		raw       bool
		gap       int64
		wantReads int
	}{{"in place, misaligned", true, 4, 4}, {"in place, aligned", true, 8, 1}, {"with room", false, 4, 1}} {
		bp := &batchPlan{}
		for i := range 4 {
			j := &job{src: src, layout: zarr.Layout{Shape: []int64{32}, DataType: zarr.Float64},
				chunk: zarr.Chunk{Key: "s/0", Offset: 4 + int64(i)*(256+tc.gap), Length: 256}}
			j.slabCost, j.rawInPlace = j.chunk.Length, tc.raw
			if !tc.raw {
				j.decInSlab = true
				j.slabCost += 256
			}
			bp.jobs = append(bp.jobs, j)
			bp.copies = append(bp.copies, plan.Copy{Job: i, Shape: []int64{32}})
		}
		if err := bp.cutWaves(&batchState{}, lim, nil); err != nil {
			t.Fatal(err)
		}
		w := bp.waves[0]
		if len(bp.waves) != 1 || len(w.reads) != tc.wantReads {
			t.Fatalf("%s: %d waves, %d reads, want one wave of %d", tc.name, len(bp.waves), len(w.reads), tc.wantReads)
		}
		for _, j := range bp.jobs {
			if r := w.reads[j.readOp]; j.slabOff != r.slabOff+j.chunk.Offset-r.offset {
				t.Fatalf("%s: chunk at %d in the slab, its read puts it at %d", tc.name, j.slabOff, r.slabOff+j.chunk.Offset-r.offset)
			}
			if tc.raw && j.slabOff%8 != 0 {
				t.Fatalf("%s: raw float64 chunk read in place at slab offset %d", tc.name, j.slabOff)
			}
		}
		if w.slab > lim.slab || w.slabEnd > w.slab {
			t.Fatalf("%s: the wave ends at %d, counted %d of %d", tc.name, w.slabEnd, w.slab, lim.slab)
		}
	}
}
