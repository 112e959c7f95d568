package ptx

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestHostAssemblyRun runs a random plan's ops through HostAssembly.Run
// the way the host engine does: each op on its own, from a copy of the
// arena bytes it reads (a chunk decoded into a scratch buffer) or from the
// arena, in a shuffled order, and compares the output with the values the
// chunks hold.
func TestHostAssemblyRun(t *testing.T) {
	eachScenario(t, func(t *testing.T, rng *rand.Rand, sc *scenario) {
		rank := len(sc.layout.Shape)
		got := poisoned(sc.layout.Bytes())
		ops := sc.plan.Ops()
		a, err := NewHostAssembly(got, sc.layout, sc.arena, ops, nil)
		if err != nil {
			t.Fatal(err)
		}
		sc1 := NewHostScratch()
		for _, i := range rng.Perm(len(ops)) {
			op := &ops[i]
			if op.SrcDtype == 0 || rng.IntN(3) == 0 {
				if err := a.Run([]int32{int32(i)}, 0, nil, sc1); err != nil {
					t.Fatal(err)
				}
				continue
			}
			// A copy of the op's source bytes with room around them, at a
			// base before its offset.
			n := srcBytes(op, rank)
			pad := int64(rng.IntN(64))
			base := max(0, op.SrcOffset-pad)
			from := append([]byte(nil), sc.arena[base:op.SrcOffset+n]...)
			if err := a.Run([]int32{int32(i)}, base, from, sc1); err != nil {
				t.Fatal(err)
			}
		}
		if d := firstDiff(sc, got); d != "" {
			t.Errorf("shape %v, %d ops: %s", sc.layout.Shape, len(ops), d)
		}
		// A copy that misses the op's last byte, and an op that is not
		// there, are refused.
		for i := range ops {
			if ops[i].SrcDtype == 0 {
				continue
			}
			end := ops[i].SrcOffset + srcBytes(&ops[i], rank)
			err := a.Run([]int32{int32(i)}, ops[i].SrcOffset, sc.arena[ops[i].SrcOffset:end-1], sc1)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("op %d given one byte too few: %v", i, err)
			}
			break
		}
		if err := a.Run([]int32{int32(len(ops))}, 0, nil, sc1); !errors.Is(err, ErrInvalid) {
			t.Errorf("op %d of %d: %v", len(ops), len(ops), err)
		}
	})
}

// TestHostAssemblyRunPart cuts every op of transformed scenarios (every
// source dtype, byte order and shuffle into every output type) into parts
// of random lengths, runs them from three goroutines at once, some from a
// copy of the op's source bytes, and compares the output and the misfit
// status with the reference; parts out of range are refused.
func TestHostAssemblyRunPart(t *testing.T) {
	eachTransformed(t, func(t *testing.T, rng *rand.Rand, ts *transformedScenario) {
		rank := len(ts.layout.Shape)
		got := poisoned(ts.layout.Bytes())
		ops := ts.plan.Ops()
		a, err := NewHostAssembly(got, ts.layout, ts.arena, ops, ts.plan.Transforms())
		if err != nil {
			t.Fatal(err)
		}
		type part struct {
			op       int32
			start, n int64
			base     int64
			from     []byte
		}
		var parts []part
		for i := range ops {
			var base int64
			var from []byte
			if ops[i].SrcDtype != 0 && rng.IntN(2) == 0 {
				base = ops[i].SrcOffset
				from = append([]byte(nil), ts.arena[base:base+srcBytes(&ops[i], rank)]...)
			}
			elems := a.Elems(int32(i))
			for start := int64(0); start < elems; {
				n := min(elems-start, 1+rng.Int64N(max(elems/3, 1)))
				parts = append(parts, part{int32(i), start, n, base, from})
				start += n
			}
		}
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for g := range errs {
			wg.Go(func() {
				sc := NewHostScratch()
				for k := g; k < len(parts); k += len(errs) {
					p := parts[k]
					if err := a.RunPart(p.op, p.start, p.n, p.base, p.from, sc); err != nil {
						errs[g] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if d := ts.diff(got); d != "" {
			t.Errorf("RunPart, shape %v: %s", ts.layout.Shape, d)
		}
		if st := a.Misfits(); st != ts.misfits {
			t.Errorf("RunPart: misfits %+v; want %+v", st, ts.misfits)
		}
		sc := NewHostScratch()
		elems := a.Elems(0)
		for _, r := range [][2]int64{{-1, 1}, {0, elems + 1}, {elems, 1}, {0, -1}} {
			if err := a.RunPart(0, r[0], r[1], 0, nil, sc); !errors.Is(err, ErrInvalid) {
				t.Errorf("RunPart(0, %d, %d) of %d elements: %v; want ErrInvalid", r[0], r[1], elems, err)
			}
		}
		if err := a.RunPart(int32(len(ops)), 0, 1, 0, nil, sc); !errors.Is(err, ErrInvalid) {
			t.Errorf("RunPart of op %d of %d: %v; want ErrInvalid", len(ops), len(ops), err)
		}
		if n := a.Elems(int32(len(ops))); n != 0 {
			t.Errorf("Elems(%d) of %d ops = %d, want 0", len(ops), len(ops), n)
		}
	})
}
