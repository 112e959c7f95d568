package ptx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
)

// gpuKernels returns the shared executor and the kernels loaded into its
// context (once per test binary), or skips without a GPU.
func gpuKernels(t testing.TB) (*cuda.Executor, *Kernels) {
	t.Helper()
	e := cudatest.Executor(t)
	k, err := loadedKernels(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, k
}

var loadedKernels = func() func(e *cuda.Executor) (*Kernels, error) {
	var once sync.Once
	var k *Kernels
	var err error
	return func(e *cuda.Executor) (*Kernels, error) {
		once.Do(func() {
			err = e.Do(func() error {
				var lerr error
				k, lerr = Load()
				return lerr
			})
		})
		return k, err
	}
}()

// deviceBuffers allocates device copies of host slices (at least one byte
// each) and frees them all at once. Its methods run on the executor.
type deviceBuffers []cuda.DevicePtr

func (b *deviceBuffers) upload(src []byte) (cuda.DevicePtr, error) {
	p, err := cuda.MemAlloc(max(len(src), 1))
	if err != nil {
		return 0, err
	}
	*b = append(*b, p)
	return p, cuda.CopyHtoD(p, src)
}

func (b *deviceBuffers) alloc(n int) (cuda.DevicePtr, error) {
	p, err := cuda.MemAlloc(max(n, 1))
	if err != nil {
		return 0, err
	}
	*b = append(*b, p)
	return p, nil
}

func (b *deviceBuffers) free() error {
	var errs []error
	for i := range *b {
		errs = append(errs, (*b)[i].Free())
	}
	*b = nil
	return errors.Join(errs...)
}

// gpuAssemble runs plan over arena on the GPU into a poisoned output and
// returns the output.
func gpuAssemble(e *cuda.Executor, k *Kernels, plan *Plan, arena []byte) ([]byte, error) {
	l := plan.Layout()
	got := make([]byte, l.Bytes())
	err := e.Do(func() (err error) {
		var bufs deviceBuffers
		defer func() { err = errors.Join(err, bufs.free()) }()
		dArena, err := bufs.upload(arena)
		if err != nil {
			return err
		}
		dOps, err := bufs.upload(OpBytes(plan.Ops()))
		if err != nil {
			return err
		}
		dBlocks, err := bufs.upload(BlockOpBytes(plan.BlockOps()))
		if err != nil {
			return err
		}
		dOut, err := bufs.alloc(len(got))
		if err != nil {
			return err
		}
		if err := cuda.MemsetD8(dOut, poison, len(got)); err != nil {
			return err
		}
		if err := k.Assemble(0, plan, AssembleArgs{Ops: dOps, BlockOps: dBlocks, Arena: dArena, ArenaBytes: int64(len(arena)), Out: dOut}); err != nil {
			return err
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
		return cuda.CopyDtoH(got, dOut)
	})
	return got, err
}

// TestAssembleGPU runs every source dtype x byte order x shuffle mode into
// both output types at every rank (random shapes, partial chunks, C, F and
// transposed layouts, missing chunks and boxes reaching outside the array)
// through the kernel and through AssembleHost, and compares every element
// of both with the values computed from the chunks.
func TestAssembleGPU(t *testing.T) {
	e, k := gpuKernels(t)
	rng := newRand(t)
	elems, ops := 0, 0
	for _, out := range []Dtype{Float32, BFloat16} {
		for rank := 1; rank <= MaxRank; rank++ {
			shapes := [][]int{randomShape(rng, rank)}
			if rank == 3 {
				shapes = append(shapes, []int{40 + rng.IntN(30), 40 + rng.IntN(30), 40 + rng.IntN(30)})
			}
			for _, shape := range shapes {
				sc, err := newScenario(rng, out, shape, allSpecs())
				if err != nil {
					t.Fatal(err)
				}
				host := poisoned(sc.layout.Bytes())
				if err := AssembleHost(host, sc.layout, sc.arena, sc.plan.Ops(), nil, 0); err != nil {
					t.Fatal(err)
				}
				if d := firstDiff(sc, host); d != "" {
					t.Errorf("%v %v host: %s", out, shape, d)
				}
				got, err := gpuAssemble(e, k, sc.plan, sc.arena)
				if err != nil {
					t.Fatal(err)
				}
				if d := firstDiff(sc, got); d != "" {
					t.Errorf("%v %v GPU (%d ops, %d blocks): %s", out, shape, len(sc.plan.Ops()), sc.plan.Blocks(), d)
				}
				elems += len(got) / out.Size()
				ops += len(sc.plan.Ops())
			}
		}
	}
	t.Logf("%d elements of %d ops compared bit for bit", elems, ops)
}

// TestAssembleGPUBlosc reads c-blosc's shuffled bytes (the fixture) with
// the kernel.
func TestAssembleGPUBlosc(t *testing.T) {
	e, k := gpuKernels(t)
	f := readBloscFixture(t, filepath.Join("testdata", "blosc_shuffle.json"))
	for _, c := range f.Cases {
		src, want := c.source(t)
		n := len(want)
		for _, out := range []Dtype{Float32, BFloat16} {
			for _, start := range []int{0, 1, n / 3} {
				l := Layout{Samples: 1, Shape: []int{n - start}, Dtype: out}
				p, err := NewPlan(l)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Copy(0, []int{0}, []int{n - start}, &src, []int{start}); err != nil {
					t.Fatal(err)
				}
				got, err := gpuAssemble(e, k, p, c.Shuffled)
				if err != nil {
					t.Fatal(err)
				}
				if exp := expectedBytes(want[start:], out); !bytes.Equal(got, exp) {
					t.Errorf("%s into %v from element %d: kernel output differs from the original data", c.Name, out, start)
				}
			}
		}
	}
}

// TestAssembleGPUCasts sends large numbers of values through the kernel's
// casts: every float32 bit pattern into bfloat16 (2^32, in slices), every
// float16 value, and random int64, uint64 and float64 values, each
// compared with Float32Bits and BFloat16Bits.
func TestAssembleGPUCasts(t *testing.T) {
	e, k := gpuKernels(t)
	rng := newRand(t)
	check := func(name string, d Dtype, out Dtype, values []uint64) {
		t.Helper()
		n := len(values)
		arena := make([]byte, n*d.Size())
		for i, v := range values {
			putValue(arena[i*d.Size():(i+1)*d.Size()], v, false)
		}
		l := Layout{Samples: 1, Shape: []int{n}, Dtype: out}
		p, err := NewPlan(l)
		if err != nil {
			t.Fatal(err)
		}
		src := Source{Dtype: d, Shape: []int{n}}
		if err := p.Copy(0, []int{0}, []int{n}, &src, []int{0}); err != nil {
			t.Fatal(err)
		}
		got, err := gpuAssemble(e, k, p, arena)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range values {
			var g, w uint32
			if out == BFloat16 {
				g, w = uint32(binary.NativeEndian.Uint16(got[2*i:])), uint32(BFloat16Bits(Float32Bits(d, v)))
			} else {
				g, w = binary.NativeEndian.Uint32(got[4*i:]), Float32Bits(d, v)
			}
			if g != w {
				t.Fatalf("%s: %v %#x into %v: kernel %#x, host %#x", name, d, v, out, g, w)
			}
		}
	}
	const n = 1 << 22
	for _, d := range []Dtype{Int32, Int64, Uint32, Uint64, Float64} {
		values := make([]uint64, n)
		for i := range values {
			values[i] = newValue(rng, d)
			if i%2 == 0 {
				values[i] = rng.Uint64() >> rng.IntN(64)
				if d.Size() == 4 {
					values[i] &= math.MaxUint32
				}
			}
		}
		for _, out := range []Dtype{Float32, BFloat16} {
			check("random", d, out, values)
		}
	}
	halves := make([]uint64, 1<<16)
	for i := range halves {
		halves[i] = uint64(i)
	}
	check("all float16", Float16, Float32, halves)

	if testing.Short() {
		t.Log("every float32 into bfloat16: skipped in -short mode")
		return
	}
	// All 2^32 float32 patterns into bfloat16, 2^28 at a time.
	const slice = 1 << 28
	l := Layout{Samples: 1, Shape: []int{slice}, Dtype: BFloat16}
	p, err := NewPlan(l)
	if err != nil {
		t.Fatal(err)
	}
	src := Source{Dtype: Float32, Shape: []int{slice}}
	if err := p.Copy(0, []int{0}, []int{slice}, &src, []int{0}); err != nil {
		t.Fatal(err)
	}
	arena := make([]uint32, slice)
	start := time.Now()
	for base := uint64(0); base < 1<<32; base += slice {
		for i := range arena {
			arena[i] = uint32(base) + uint32(i)
		}
		got, err := gpuAssemble(e, k, p, u32Bytes(arena))
		if err != nil {
			t.Fatal(err)
		}
		if err := parallelCheck(slice, func(i int) error {
			f := uint32(base) + uint32(i)
			if g, w := binary.NativeEndian.Uint16(got[2*i:]), BFloat16Bits(f); g != w {
				return fmt.Errorf("float32 %#08x into bfloat16: kernel %#04x, host %#04x", f, g, w)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("all 2^32 float32 patterns into bfloat16 agree (%v)", time.Since(start).Round(time.Millisecond))
}

// parallelCheck runs check(0..n-1) on all CPUs and returns one failure.
func parallelCheck(n int, check func(i int) error) error {
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w * n / workers; i < (w+1)*n/workers; i++ {
				if err := check(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestReduceStatusGPU checks the status kernel against a direct count on
// random waves, with bad chunks by status, by size, by both, or none; the
// summary buffer is poisoned first, so every field must be written.
func TestReduceStatusGPU(t *testing.T) {
	e, k := gpuKernels(t)
	rng := newRand(t)
	for _, n := range []int{0, 1, 2, 31, 33, 1023, 1024, 1025, 5000, 100003} {
		for _, badRate := range []int{0, 1, 50, 1000} {
			statuses := make([]int32, n)
			actual, expected := make([]uint64, n), make([]uint64, n)
			want := StatusSummary{First: NoChunk}
			for i := range n {
				expected[i] = rng.Uint64N(1 << 40)
				actual[i] = expected[i]
				if badRate > 0 && rng.IntN(1000) < badRate {
					switch rng.IntN(3) {
					case 0:
						statuses[i] = 1 + rng.Int32N(20)
					case 1:
						actual[i] = rng.Uint64N(1 << 40)
					default:
						statuses[i] = -rng.Int32N(5) - 1
						actual[i] = 0
					}
				}
				if statuses[i] != 0 || actual[i] != expected[i] {
					if want.Bad == 0 {
						want.First, want.Status, want.Actual, want.Expected = uint32(i), statuses[i], actual[i], expected[i]
					}
					want.Bad++
				}
			}
			raw := make([]byte, StatusSummarySize)
			err := e.Do(func() (err error) {
				var bufs deviceBuffers
				defer func() { err = errors.Join(err, bufs.free()) }()
				st := make([]byte, 4*n)
				for i, s := range statuses {
					binary.NativeEndian.PutUint32(st[4*i:], uint32(s))
				}
				dSt, err := bufs.upload(st)
				if err != nil {
					return err
				}
				dAct, err := bufs.upload(u64Bytes(actual))
				if err != nil {
					return err
				}
				dExp, err := bufs.upload(u64Bytes(expected))
				if err != nil {
					return err
				}
				dSum, err := bufs.upload(bytes.Repeat([]byte{0xab}, StatusSummarySize))
				if err != nil {
					return err
				}
				if err := k.ReduceStatus(0, dSt, dAct, dExp, n, dSum); err != nil {
					return err
				}
				if err := cuda.Synchronize(); err != nil {
					return err
				}
				return cuda.CopyDtoH(raw, dSum)
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeStatusSummary(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || binary.NativeEndian.Uint32(raw[12:]) != 0 {
				t.Errorf("n %d, bad rate %d/1000: summary %+v (raw %x); want %+v", n, badRate, got, raw, want)
			}
		}
	}
}

func u64Bytes(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// TestLoadGPU reports how the kernels compiled for this device and checks
// the launch wrappers' argument checks.
func TestLoadGPU(t *testing.T) {
	e, k := gpuKernels(t)
	err := e.Do(func() error {
		for _, f := range []struct {
			name string
			fn   cuda.Function
		}{{"damacy_assemble", k.assemble}, {"damacy_reduce_status", k.reduceStatus}} {
			regs, err := f.fn.Attribute(cuda.FuncAttrNumRegs)
			if err != nil {
				return err
			}
			ptx, _ := f.fn.Attribute(cuda.FuncAttrPTXVersion)
			bin, _ := f.fn.Attribute(cuda.FuncAttrBinaryVersion)
			local, _ := f.fn.Attribute(cuda.FuncAttrLocalSizeBytes)
			t.Logf("%s: PTX target %d, SASS %d, %d registers, %d bytes local", f.name, ptx, bin, regs, local)
		}
		// Timing a fresh JIT: a second load of the same images.
		start := time.Now()
		k2, err := Load()
		if err != nil {
			return err
		}
		t.Logf("second Load: %v (the driver caches JIT output)", time.Since(start).Round(time.Microsecond))
		if err := k2.Unload(); err != nil {
			return err
		}
		if err := k2.Unload(); err != nil {
			return fmt.Errorf("second Unload: %w", err)
		}
		l := Layout{Samples: 1, Shape: []int{8}, Dtype: Float32}
		p, err := NewPlan(l)
		if err != nil {
			return err
		}
		if err := p.Copy(0, []int{0}, []int{8}, &Source{Offset: 8, Dtype: Uint8, Shape: []int{8}}, []int{0}); err != nil {
			return err
		}
		args := AssembleArgs{Ops: 256, BlockOps: 256, Arena: 256, ArenaBytes: 16, Out: 256}
		if err := k2.Assemble(0, p, args); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("assemble on unloaded kernels: %v", err)
		}
		if err := k.Assemble(0, p, AssembleArgs{Ops: 256, BlockOps: 256, Arena: 256, ArenaBytes: 15, Out: 256}); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("assemble beyond the arena: %v", err)
		}
		if err := k.Assemble(0, p, AssembleArgs{Ops: 256, BlockOps: 256, Arena: 260, ArenaBytes: 16, Out: 256}); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("misaligned arena: %v", err)
		}
		if err := k.ReduceStatus(0, 256, 256, 256, 4, 260); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("misaligned summary: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAssembleGPU measures the kernel alone on the throughput
// scenario's geometry (128^3 boxes from 32x64x64 uint16 chunks), 32
// samples per launch; bytes are output bytes.
func BenchmarkAssembleGPU(b *testing.B) {
	e, k := gpuKernels(b)
	for _, tt := range []struct {
		name    string
		out     Dtype
		shuffle Shuffle
	}{
		{"f32/plain", Float32, NoShuffle},
		{"bf16/plain", BFloat16, NoShuffle},
		{"f32/byteshuffle", Float32, ByteShuffle},
		{"f32/bitshuffle", Float32, BitShuffle},
	} {
		b.Run(tt.name, func(b *testing.B) {
			l, arena, plan := throughputBatch(b, 32, tt.out, tt.shuffle)
			var bufs deviceBuffers
			var dOps, dBlocks, dArena, dOut cuda.DevicePtr
			err := e.Do(func() (err error) {
				if dArena, err = bufs.upload(arena); err != nil {
					return err
				}
				if dOps, err = bufs.upload(OpBytes(plan.Ops())); err != nil {
					return err
				}
				if dBlocks, err = bufs.upload(BlockOpBytes(plan.BlockOps())); err != nil {
					return err
				}
				dOut, err = bufs.alloc(int(l.Bytes()))
				return err
			})
			defer e.Do(bufs.free)
			if err != nil {
				b.Fatal(err)
			}
			// Time the kernel with events around a few launches per
			// iteration, so that the executor round trip does not count.
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
						if err := k.Assemble(0, plan, AssembleArgs{Ops: dOps, BlockOps: dBlocks, Arena: dArena, ArenaBytes: int64(len(arena)), Out: dOut}); err != nil {
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
			b.ReportMetric(float64(len(plan.Ops())), "ops")
		})
	}
}

// BenchmarkReduceStatusGPU times the status kernel on a wave of 100000
// chunks, all good (every element is read), with events.
func BenchmarkReduceStatusGPU(b *testing.B) {
	e, k := gpuKernels(b)
	const n = 100000
	sizes := make([]uint64, n)
	for i := range sizes {
		sizes[i] = uint64(i) << 12
	}
	var bufs deviceBuffers
	var dSt, dAct, dExp, dSum cuda.DevicePtr
	err := e.Do(func() (err error) {
		if dSt, err = bufs.upload(make([]byte, 4*n)); err != nil {
			return err
		}
		if dAct, err = bufs.upload(u64Bytes(sizes)); err != nil {
			return err
		}
		if dExp, err = bufs.upload(u64Bytes(sizes)); err != nil {
			return err
		}
		dSum, err = bufs.alloc(StatusSummarySize)
		return err
	})
	defer e.Do(bufs.free)
	if err != nil {
		b.Fatal(err)
	}
	const launches = 100
	var kernel time.Duration
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
				if err := k.ReduceStatus(0, dSt, dAct, dExp, n, dSum); err != nil {
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
	b.ReportMetric(kernel.Seconds()*1e6/float64(b.N*launches), "kernel-µs/launch")
}
