package dlpack

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// countOwner counts its releases.
type countOwner struct{ n atomic.Int32 }

func (o *countOwner) Release() { o.n.Add(1) }

func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed>>7))
}

func mustLoadC(t *testing.T) *clib {
	t.Helper()
	c, err := loadC()
	if err != nil {
		t.Skipf("no C library: %v", err)
	}
	return c
}

// cBuffer returns n bytes of C memory filled with random bytes, freed at
// the end of the test.
func cBuffer(t *testing.T, c *clib, r *rand.Rand, n int) uintptr {
	t.Helper()
	p, _, _ := purego.SyscallN(c.mallocFn, uintptr(n))
	if p == 0 {
		t.Fatalf("malloc(%d) failed", n)
	}
	t.Cleanup(func() { c.free(p) })
	b := unsafe.Slice((*byte)(cmem(p)), n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return p
}

// managedView is what a consumer reads from an exported block.
type managedView struct {
	tensor  Tensor
	ctx     uintptr
	deleter uintptr
	version PackVersion
	flags   Flags
	shape   []int64
	strides []int64
}

func readManaged(p uintptr, f Format) managedView {
	var v managedView
	if f == Legacy {
		m := (*ManagedTensor)(cmem(p))
		v.tensor, v.ctx, v.deleter = m.DLTensor, m.ManagerCtx, m.Deleter
	} else {
		m := (*ManagedTensorVersioned)(cmem(p))
		v.tensor, v.ctx, v.deleter, v.version, v.flags = m.DLTensor, m.ManagerCtx, m.Deleter, m.Version, m.Flags
	}
	n := int(v.tensor.NDim)
	if v.tensor.Shape != 0 {
		v.shape = slices.Clone(unsafe.Slice((*int64)(cmem(v.tensor.Shape)), n))
	}
	if v.tensor.Strides != 0 {
		v.strides = slices.Clone(unsafe.Slice((*int64)(cmem(v.tensor.Strides)), n))
	}
	return v
}

func isLive(ptr uintptr) bool {
	live.mu.Lock()
	defer live.mu.Unlock()
	_, ok := live.blocks[ptr]
	return ok
}

var exportTypes = []DataType{
	Scalar(Float, 32), Scalar(Bfloat, 16), Scalar(Float, 16), Scalar(Float, 64),
	Scalar(UInt, 8), Scalar(UInt, 16), Scalar(Int, 32), Scalar(Int, 64),
	Scalar(Bool, 8), Scalar(Complex, 64),
}

// TestExportLayout exports random tensors in both formats, reads the C
// block back the way a consumer does, and ends each export through the C
// deleter pointer it carries.
func TestExportLayout(t *testing.T) {
	c := mustLoadC(t)
	r := newRand(t)
	for i := range 200 {
		f := Format(i % 2)
		dt := exportTypes[r.IntN(len(exportTypes))]
		shape := make([]int64, r.IntN(6))
		n := int64(1)
		for j := range shape {
			shape[j] = 1 + r.Int64N(7)
			n *= shape[j]
		}
		size := n * int64(dt.Bits) / 8
		d := Desc{
			Data:   cBuffer(t, c, r, int(size)),
			Device: Device{Type: []DeviceType{CPU, CUDA, CUDAHost}[i%3]},
			DType:  dt,
			Shape:  shape,
		}
		if d.Device.Type != CPU {
			d.Device.ID = r.Int32N(8)
		}
		want := unsafe.Slice((*byte)(cmem(d.Data)), size)
		var o countOwner
		m, err := Export(d, f, &o)
		if err != nil {
			t.Fatalf("Export(%v, %v) = %v", d, f, err)
		}
		v := readManaged(m.Ptr(), f)
		if v.tensor.Data != d.Data || v.tensor.Device != d.Device || v.tensor.DType != dt ||
			v.tensor.NDim != int32(len(shape)) || v.tensor.ByteOffset != 0 {
			t.Fatalf("%v export of %+v: DLTensor = %+v", f, d, v.tensor)
		}
		if len(shape) == 0 {
			if v.tensor.Shape != 0 || v.tensor.Strides != 0 {
				t.Errorf("scalar export: shape %#x, strides %#x; want null", v.tensor.Shape, v.tensor.Strides)
			}
		} else {
			if v.tensor.Shape < m.Ptr() || v.tensor.Strides != v.tensor.Shape+8*uintptr(len(shape)) {
				t.Errorf("shape %#x, strides %#x not in the block at %#x", v.tensor.Shape, v.tensor.Strides, m.Ptr())
			}
			if !slices.Equal(v.shape, shape) {
				t.Errorf("shape = %v; want %v", v.shape, shape)
			}
			if ws := cOrderStrides(shape); !slices.Equal(v.strides, ws) {
				t.Errorf("strides of %v = %v; want %v", shape, v.strides, ws)
			}
		}
		if got := unsafe.Slice((*byte)(cmem(v.tensor.Data)), size); !slices.Equal(got, want) {
			t.Errorf("data through the DLTensor differs from the buffer")
		}
		wantDeleter := c.deleterVersioned
		if f == Legacy {
			wantDeleter = c.deleter
		} else if v.version != (PackVersion{Major: 1, Minor: 0}) || v.flags != 0 {
			t.Errorf("version %+v, flags %#x; want 1.0, 0", v.version, v.flags)
		}
		if v.deleter != wantDeleter || uint64(v.ctx) != m.id {
			t.Errorf("deleter %#x, manager_ctx %d; want %#x, %d", v.deleter, v.ctx, wantDeleter, m.id)
		}
		if o.n.Load() != 0 || !isLive(m.Ptr()) {
			t.Fatalf("owner released %d times before the deleter ran", o.n.Load())
		}

		purego.SyscallN(v.deleter, m.Ptr())
		if o.n.Load() != 1 || isLive(m.Ptr()) {
			t.Fatalf("after the deleter: %d releases, live %v; want 1, false", o.n.Load(), isLive(m.Ptr()))
		}
		purego.SyscallN(v.deleter, m.Ptr()) // a second call leaves the freed block alone
		m.Delete()
		if o.n.Load() != 1 {
			t.Fatalf("deleter called twice and Delete: %d releases; want 1", o.n.Load())
		}
	}
}

func cOrderStrides(shape []int64) []int64 {
	s := make([]int64, len(shape))
	n := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= shape[i]
	}
	return s
}

func TestDelete(t *testing.T) {
	var o countOwner
	m, err := Export(Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Bfloat, 16), Shape: []int64{2, 3}}, Legacy, &o)
	if err != nil {
		t.Fatal(err)
	}
	m.Delete()
	m.Delete()
	if o.n.Load() != 1 || isLive(m.Ptr()) {
		t.Fatalf("Delete twice: %d releases, live %v; want 1, false", o.n.Load(), isLive(m.Ptr()))
	}
	purego.SyscallN(mustLoadC(t).deleter, m.Ptr())
	if o.n.Load() != 1 {
		t.Fatalf("deleter after Delete: %d releases; want 1", o.n.Load())
	}
}

// TestStaleDelete checks that a Managed whose deleter ran cannot end a
// later export that malloc placed at the same address.
func TestStaleDelete(t *testing.T) {
	runtime.LockOSThread() // malloc's per-thread cache hands the freed block back
	defer runtime.UnlockOSThread()
	d := Desc{Data: 256, Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{4, 5, 6}}
	var a, b countOwner
	ma, err := Export(d, Versioned, &a)
	if err != nil {
		t.Fatal(err)
	}
	purego.SyscallN(readManaged(ma.Ptr(), Versioned).deleter, ma.Ptr())
	mb, err := Export(d, Versioned, &b)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Delete()
	if mb.Ptr() != ma.Ptr() {
		t.Skipf("malloc placed the second export at %#x, not %#x", mb.Ptr(), ma.Ptr())
	}
	ma.Delete()
	if a.n.Load() != 1 || b.n.Load() != 0 || !isLive(mb.Ptr()) {
		t.Fatalf("stale Delete: releases %d, %d, live %v; want 1, 0, true", a.n.Load(), b.n.Load(), isLive(mb.Ptr()))
	}
}

// TestDeleterForeignThread runs deleters on threads that C created, as a
// consumer's worker thread would.
func TestDeleterForeignThread(t *testing.T) {
	h, err := purego.Dlopen(libcName, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Skipf("no C library: %v", err)
	}
	create, err := purego.Dlsym(h, "pthread_create")
	if err != nil {
		t.Skipf("no pthread_create: %v", err)
	}
	join, err := purego.Dlsym(h, "pthread_join")
	if err != nil {
		t.Skipf("no pthread_join: %v", err)
	}
	const n = 8
	owners := make([]countOwner, n)
	threads := make([]uint64, n) // pthread_t
	for i := range n {
		m, err := Export(Desc{Data: 8, Device: Device{Type: CPU}, DType: Scalar(Float, 64), Shape: []int64{int64(i)}}, Format(i%2), &owners[i])
		if err != nil {
			t.Fatal(err)
		}
		// The deleter's C signature, void f(T*), serves as a thread start
		// routine void *f(void*); the thread's result is unused.
		deleter := readManaged(m.Ptr(), m.Format()).deleter
		if rc, _, _ := purego.SyscallN(create, uintptr(unsafe.Pointer(&threads[i])), 0, deleter, m.Ptr()); rc != 0 {
			t.Fatalf("pthread_create = %d", rc)
		}
	}
	for i := range n {
		if rc, _, _ := purego.SyscallN(join, uintptr(threads[i]), 0); rc != 0 {
			t.Fatalf("pthread_join = %d", rc)
		}
		if got := owners[i].n.Load(); got != 1 {
			t.Errorf("export %d: %d releases after its thread ran the deleter; want 1", i, got)
		}
	}
}

// TestConcurrent ends exports from many goroutines at once, half through
// the C deleter and half through Delete, some twice.
func TestConcurrent(t *testing.T) {
	const goroutines, each = 8, 300
	owners := make([]countOwner, goroutines*each)
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			var pending []*Managed
			for i := range each {
				d := Desc{Data: 1024, Device: Device{Type: CUDA}, DType: Scalar(Bfloat, 16), Shape: []int64{r.Int64N(9), 3}}
				m, err := Export(d, Format(r.IntN(2)), &owners[g*each+i])
				if err != nil {
					errc <- err
					return
				}
				pending = append(pending, m)
				for len(pending) > 0 && r.IntN(3) == 0 {
					k := r.IntN(len(pending))
					m := pending[k]
					pending = slices.Delete(pending, k, k+1)
					if r.IntN(2) == 0 {
						purego.SyscallN(readManaged(m.Ptr(), m.Format()).deleter, m.Ptr())
					}
					m.Delete()
				}
			}
			for _, m := range pending {
				m.Delete()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for i := range owners {
		if got := owners[i].n.Load(); got != 1 {
			t.Fatalf("export %d released %d times; want 1", i, got)
		}
	}
}

var invalidTests = []struct {
	name string
	d    Desc
}{
	{"bad device type", Desc{Data: 64, Device: Device{Type: ROCM}, DType: Scalar(Float, 32), Shape: []int64{2}}},
	{"cpu with id", Desc{Data: 64, Device: Device{Type: CPU, ID: 1}, DType: Scalar(Float, 32), Shape: []int64{2}}},
	{"negative cuda id", Desc{Data: 64, Device: Device{Type: CUDA, ID: -1}, DType: Scalar(Float, 32), Shape: []int64{2}}},
	{"lanes", Desc{Data: 64, Device: Device{Type: CUDA}, DType: DataType{Code: Float, Bits: 32, Lanes: 2}, Shape: []int64{2}}},
	{"float8", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Float, 8), Shape: []int64{2}}},
	{"bfloat32", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Bfloat, 32), Shape: []int64{2}}},
	{"opaque", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(OpaqueHandle, 64), Shape: []int64{2}}},
	{"unknown code", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(TypeCode(9), 8), Shape: []int64{2}}},
	{"negative extent", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{2, -1}}},
	{"overflow", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{1 << 31, 1 << 31}}},
	{"too many dims", Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: make([]int64, MaxDims+1)}},
	{"null data", Desc{Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{2}}},
	{"misaligned", Desc{Data: 66, Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{2}}},
}

func TestExportInvalid(t *testing.T) {
	for _, tt := range invalidTests {
		var o countOwner
		m, err := Export(tt.d, Versioned, &o)
		if m != nil || !errors.Is(err, ErrInvalid) || o.n.Load() != 0 {
			t.Errorf("%s: Export(%+v) = %v, %v; want nil, ErrInvalid", tt.name, tt.d, m, err)
		}
	}
	d := Desc{Data: 64, Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{2}}
	if m, err := Export(d, Versioned, nil); m != nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("Export with nil owner = %v, %v; want nil, ErrInvalid", m, err)
	}
	if m, err := Export(d, Format(2), ReleaseFunc(func() {})); m != nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("Export with Format(2) = %v, %v; want nil, ErrInvalid", m, err)
	}
}

// TestExportEmpty checks the edge cases that are valid: no elements with
// a null pointer, and a scalar.
func TestExportEmpty(t *testing.T) {
	for _, d := range []Desc{
		{Device: Device{Type: CUDA}, DType: Scalar(Float, 32), Shape: []int64{4, 0, 3}},
		{Data: 128, Device: Device{Type: CPU}, DType: Scalar(Bfloat, 16)},
	} {
		released := 0
		m, err := Export(d, Legacy, ReleaseFunc(func() { released++ }))
		if err != nil {
			t.Fatalf("Export(%+v) = %v", d, err)
		}
		v := readManaged(m.Ptr(), Legacy)
		if !slices.Equal(v.shape, d.Shape) || v.tensor.NDim != int32(len(d.Shape)) {
			t.Errorf("Export(%+v): shape %v, ndim %d", d, v.shape, v.tensor.NDim)
		}
		m.Delete()
		if released != 1 {
			t.Errorf("Export(%+v): %d releases; want 1", d, released)
		}
	}
}
