package ptx

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda"
)

// gpuAssembleAll runs plan over arena on the GPU into an output poisoned
// with poison, with the plan's transform table and, when withStatus, a
// zeroed misfit status, and returns the output and the status (zero
// without one). The status's lock word must be zero after the launch.
func gpuAssembleAll(e *cuda.Executor, k *Kernels, plan *Plan, arena []byte, poison byte, withStatus bool) ([]byte, MisfitStatus, error) {
	l := plan.Layout()
	got := make([]byte, l.Bytes())
	raw := make([]byte, MisfitStatusSize)
	err := e.Do(func() (err error) {
		var bufs deviceBuffers
		defer func() { err = errors.Join(err, bufs.free()) }()
		var a AssembleArgs
		a.ArenaBytes = int64(len(arena))
		if a.Arena, err = bufs.upload(arena); err != nil {
			return err
		}
		if a.Ops, err = bufs.upload(OpBytes(plan.Ops())); err != nil {
			return err
		}
		if a.BlockOps, err = bufs.upload(BlockOpBytes(plan.BlockOps())); err != nil {
			return err
		}
		if ts := plan.Transforms(); ts != nil {
			if a.Transforms, err = bufs.upload(TransformBytes(ts)); err != nil {
				return err
			}
		}
		if withStatus {
			if a.Misfits, err = bufs.upload(make([]byte, MisfitStatusSize)); err != nil {
				return err
			}
		}
		if a.Out, err = bufs.alloc(len(got)); err != nil {
			return err
		}
		if err := cuda.MemsetD8(a.Out, poison, len(got)); err != nil {
			return err
		}
		if err := k.Assemble(0, plan, a); err != nil {
			return err
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
		if withStatus {
			if err := cuda.CopyDtoH(raw, a.Misfits); err != nil {
				return err
			}
		}
		return cuda.CopyDtoH(got, a.Out)
	})
	if err != nil {
		return nil, MisfitStatus{}, err
	}
	if !bytes.Equal(raw[28:], make([]byte, 4)) {
		return nil, MisfitStatus{}, fmt.Errorf("status lock word %x after the launch", raw[28:])
	}
	st, err := DecodeMisfitStatus(raw)
	return got, st, err
}

// TestAssembleGPUTransforms runs every source dtype x byte order x
// shuffle mode into every output type (float32, bfloat16 and the integer
// types) at ranks 1 to 5, with random per-sample transforms (flips,
// rotations and permutations of equal extents; intensity maps on float
// outputs), through the kernel, and compares its output bit for bit, and
// its misfit status field for field, with the expected ones, which
// AssembleHost matches (TestAssembleHostTransforms). Float outputs run
// with and without a status, which they must leave zero.
func TestAssembleGPUTransforms(t *testing.T) {
	e, k := gpuKernels(t)
	elems := 0
	eachTransformed(t, func(t *testing.T, rng *rand.Rand, ts *transformedScenario) {
		withStatus := ts.layout.Dtype.IsInteger() || rng.IntN(2) == 0
		got, st, err := gpuAssembleAll(e, k, ts.plan, ts.arena, poison, withStatus)
		if err != nil {
			t.Fatal(err)
		}
		if d := ts.diff(got); d != "" {
			t.Errorf("shape %v, %d ops, %d blocks: %s", ts.layout.Shape, len(ts.plan.Ops()), ts.plan.Blocks(), d)
		}
		if st != ts.misfits {
			t.Errorf("misfit status %+v; want %+v", st, ts.misfits)
		}
		elems += len(got) / ts.layout.Dtype.Size()
	})
	t.Logf("%d elements compared bit for bit", elems)
}

// TestAssembleGPUIntCasts sends many values of every source type through
// the kernel's integer conversions into every integer output type: each
// source type's edge values, values that mostly fit and random bits, in
// one op of a million elements, and one op whose every element is a
// misfit (every block then contends for the status). Output and status
// must be the host twin's.
func TestAssembleGPUIntCasts(t *testing.T) {
	e, k := gpuKernels(t)
	rng := newRand(t)
	const n = 1 << 20
	for d := Bool; d <= Float64; d++ {
		for _, out := range outputInts {
			values := edgeValues(d)
			for len(values) < n {
				if rng.IntN(4) == 0 {
					values = append(values, newValue(rng, d))
				} else {
					values = append(values, newIntValue(rng, d, out))
				}
			}
			cases := [][]uint64{values}
			if d == Float32 {
				all := make([]uint64, n)
				for i := range all {
					all[i] = uint64(math.Float32bits(0.5))
				}
				cases = append(cases, all)
			}
			for _, vals := range cases {
				arena := make([]byte, len(vals)*d.Size())
				for i, v := range vals {
					putValue(arena[i*d.Size():(i+1)*d.Size()], v, false)
				}
				l := Layout{Samples: 1, Shape: []int{len(vals)}, Dtype: out}
				p, err := NewPlan(l)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Copy(0, []int{0}, []int{len(vals)}, &Source{Dtype: d, Shape: []int{len(vals)}}, []int{0}); err != nil {
					t.Fatal(err)
				}
				host := poisoned(l.Bytes())
				a, err := NewHostAssembly(host, l, arena, p.Ops(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Run([]int32{0}, 0, nil, NewHostScratch()); err != nil {
					t.Fatal(err)
				}
				got, st, err := gpuAssembleAll(e, k, p, arena, 0, true)
				if err != nil {
					t.Fatal(err)
				}
				if i := firstByteDiff(got, host, out.Size()); i >= 0 {
					t.Errorf("%v into %v: element %d (value %#x): kernel %x, host %x", d, out, i, vals[i], got[i*out.Size():(i+1)*out.Size()], host[i*out.Size():(i+1)*out.Size()])
				}
				if want := a.Misfits(); st != want {
					t.Errorf("%v into %v: status %+v; host %+v", d, out, st, want)
				}
			}
		}
	}
}

// firstByteDiff returns the first element of the given size where a and b
// differ, or -1.
func firstByteDiff(a, b []byte, size int) int {
	for i := 0; i < len(a); i += size {
		if !bytes.Equal(a[i:i+size], b[i:i+size]) {
			return i / size
		}
	}
	return -1
}

// TestAssembleGPUArgs checks Assemble's checks of the transform table and
// misfit status arguments.
func TestAssembleGPUArgs(t *testing.T) {
	e, k := gpuKernels(t)
	err := e.Do(func() error {
		l := Layout{Samples: 1, Shape: []int{8}, Dtype: Uint8}
		p, err := NewPlan(l)
		if err != nil {
			return err
		}
		if err := p.Copy(0, []int{0}, []int{8}, &Source{Offset: 8, Dtype: Int16, Shape: []int{8}}, []int{0}); err != nil {
			return err
		}
		good := AssembleArgs{Ops: 256, BlockOps: 256, Arena: 256, ArenaBytes: 24, Out: 256, Misfits: 512}
		for _, tt := range []struct {
			name string
			edit func(*AssembleArgs)
		}{
			{"no status where values may not fit", func(a *AssembleArgs) { a.Misfits = 0 }},
			{"misaligned status", func(a *AssembleArgs) { a.Misfits = 516 }},
			{"a table for a plan without transforms", func(a *AssembleArgs) { a.Transforms = 1024 }},
		} {
			a := good
			tt.edit(&a)
			if err := k.Assemble(0, p, a); !errors.Is(err, ErrInvalid) {
				return fmt.Errorf("%s: %v", tt.name, err)
			}
		}
		if err := p.SetTransform(0, must(Identity().Flip(0))); err != nil {
			return err
		}
		if err := k.Assemble(0, p, good); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("no table for a plan with transforms: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAssembleGPUTransforms measures the kernel on the throughput
// geometry (see BenchmarkAssembleGPU, whose identity cases are the
// baseline) with every sample flipped and rotated, with an intensity map
// as well, and into integer outputs: int32 from uint16 (no check) and
// uint8 from uint16 (checked, nothing misfits).
func BenchmarkAssembleGPUTransforms(b *testing.B) {
	e, k := gpuKernels(b)
	for _, tt := range []struct {
		name      string
		out       Dtype
		transform bool
		intensity bool
	}{
		{"f32/flip+rot90", Float32, true, false},
		{"f32/flip+rot90+normalize", Float32, true, true},
		{"bf16/flip+rot90+normalize", BFloat16, true, true},
		{"i32/identity", Int32, false, false},
		{"u8/checked", Uint8, false, false},
	} {
		b.Run(tt.name, func(b *testing.B) {
			l, arena, plan := throughputBatch(b, 32, tt.out, NoShuffle)
			if tt.transform {
				tf := must(must(Identity().Flip(0)).Rot90(1, 1, 2))
				if tt.intensity {
					tf = must(tf.Normalize(2000, 1000, -3, 3))
				}
				for s := range l.Samples {
					if err := plan.SetTransform(s, tf); err != nil {
						b.Fatal(err)
					}
				}
			}
			if tt.out == Uint8 {
				// 12-bit values into uint8: zero the high nibble of each
				// so that none misfits.
				for i := 1; i < len(arena); i += 2 {
					arena[i] = 0
				}
			}
			var bufs deviceBuffers
			var a AssembleArgs
			a.ArenaBytes = int64(len(arena))
			err := e.Do(func() (err error) {
				if a.Arena, err = bufs.upload(arena); err != nil {
					return err
				}
				if a.Ops, err = bufs.upload(OpBytes(plan.Ops())); err != nil {
					return err
				}
				if a.BlockOps, err = bufs.upload(BlockOpBytes(plan.BlockOps())); err != nil {
					return err
				}
				if ts := plan.Transforms(); ts != nil {
					if a.Transforms, err = bufs.upload(TransformBytes(ts)); err != nil {
						return err
					}
				}
				if plan.NeedsCheck() {
					if a.Misfits, err = bufs.upload(make([]byte, MisfitStatusSize)); err != nil {
						return err
					}
				}
				a.Out, err = bufs.alloc(int(l.Bytes()))
				return err
			})
			defer e.Do(bufs.free)
			if err != nil {
				b.Fatal(err)
			}
			const launches = 10
			var kernel time.Duration
			b.SetBytes(l.Bytes() * launches)
			for b.Loop() {
				err := e.Do(func() (err error) {
					start, err := cuda.NewEvent(cuda.EventDefault)
					if err != nil {
						return err
					}
					defer start.Destroy()
					end, err := cuda.NewEvent(cuda.EventDefault)
					if err != nil {
						return err
					}
					defer end.Destroy()
					if err := start.Record(0); err != nil {
						return err
					}
					for range launches {
						if err := k.Assemble(0, plan, a); err != nil {
							return err
						}
					}
					if err := end.Record(0); err != nil {
						return err
					}
					if err := end.Synchronize(); err != nil {
						return err
					}
					d, err := cuda.EventElapsedTime(start, end)
					kernel += d
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(l.Bytes()*launches)*float64(b.N)/kernel.Seconds()/1e9, "kernel-GB/s")
		})
	}
}
