package ptx

import (
	"errors"
	"math/rand/v2"
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
