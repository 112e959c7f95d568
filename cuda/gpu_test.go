package cuda_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"structs"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
)

// do runs f on the executor and fails the test with its error.
func do(t *testing.T, e *cuda.Executor, f func() error) {
	t.Helper()
	if err := e.Do(f); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func TestFoundation(t *testing.T) {
	dev := cudatest.MustHaveGPU(t)
	v, err := cuda.DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	name, err := dev.Name()
	if err != nil {
		t.Fatal(err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	total, err := dev.TotalMem()
	if err != nil {
		t.Fatal(err)
	}
	bus, err := dev.PCIBusID()
	if err != nil {
		t.Fatal(err)
	}
	attr := func(a cuda.DeviceAttribute) int {
		v, err := dev.Attribute(a)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sms := attr(cuda.DevAttrMultiprocessorCount)
	t.Logf("driver CUDA %d.%d; %d device(s)", v/1000, v%1000/10, n)
	t.Logf("device 0: %s, compute capability %d.%d, %d SMs, %.1f GiB, PCI %s (domain %d bus %d device %d)",
		name, major, minor, sms, float64(total)/(1<<30), bus,
		attr(cuda.DevAttrPCIDomainID), attr(cuda.DevAttrPCIBusID), attr(cuda.DevAttrPCIDeviceID))
	t.Logf("async engines %d, memory pools %d, max threads/block %d, warp %d, unified addressing %d",
		attr(cuda.DevAttrAsyncEngineCount), attr(cuda.DevAttrMemoryPoolsSupported),
		attr(cuda.DevAttrMaxThreadsPerBlock), attr(cuda.DevAttrWarpSize), attr(cuda.DevAttrUnifiedAddressing))
	if n < 1 || name == "" || major < 3 || total <= 0 || sms <= 0 || attr(cuda.DevAttrWarpSize) != 32 {
		t.Errorf("implausible device report")
	}
	if want := fmt.Sprintf(":%02x:", attr(cuda.DevAttrPCIBusID)); !strings.Contains(strings.ToLower(bus), want) {
		t.Errorf("PCIBusID = %q, want it to contain %q (the bus attribute)", bus, want)
	}

	e := cudatest.Executor(t)
	do(t, e, func() error {
		free, tot, err := cuda.MemGetInfo()
		if err != nil {
			return err
		}
		t.Logf("memory: %.1f GiB free of %.1f GiB", float64(free)/(1<<30), float64(tot)/(1<<30))
		if tot != total || free <= 0 || free > tot {
			return fmt.Errorf("MemGetInfo = %d, %d; TotalMem = %d", free, tot, total)
		}
		c, err := cuda.CurrentContext()
		if err != nil {
			return err
		}
		if c != e.Context() || c == 0 {
			return fmt.Errorf("CurrentContext = %#x on the executor, want %#x", c, e.Context())
		}
		d, err := cuda.CurrentDevice()
		if err != nil {
			return err
		}
		if d != dev {
			return fmt.Errorf("CurrentDevice = %d, want %d", d, dev)
		}
		return nil
	})
}

func TestMemoryRoundTrip(t *testing.T) {
	e := cudatest.Executor(t)
	r := newRand(t)
	for _, n := range []int{1, 7, 4096, 1<<20 + 13} {
		src := randomBytes(r, n)
		do(t, e, func() error {
			a, err := cuda.MemAlloc(n)
			if err != nil {
				return err
			}
			defer a.Free()
			b, err := cuda.MemAlloc(n)
			if err != nil {
				return err
			}
			defer b.Free()
			if err := cuda.CopyHtoD(a, src); err != nil {
				return err
			}
			if err := cuda.CopyDtoD(b, a, n); err != nil {
				return err
			}
			got := make([]byte, n)
			if err := cuda.CopyDtoH(got, b); err != nil {
				return err
			}
			if !bytes.Equal(got, src) {
				return fmt.Errorf("%d bytes: H2D, D2D, D2H round trip differs", n)
			}
			// memset a middle range, then check all three parts
			lo, hi := n/3, n-n/3
			v := byte(r.Uint32())
			if err := cuda.MemsetD8(b+cuda.DevicePtr(lo), v, hi-lo); err != nil {
				return err
			}
			if err := cuda.CopyDtoH(got, b); err != nil {
				return err
			}
			want := bytes.Clone(src)
			for i := lo; i < hi; i++ {
				want[i] = v
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%d bytes: MemsetD8 of [%d,%d) wrong", n, lo, hi)
			}
			if err := a.Free(); err != nil {
				return err
			}
			if a != 0 {
				return fmt.Errorf("Free left %v", a)
			}
			return a.Free() // repeat is a no-op
		})
	}
}

func TestStreamsEvents(t *testing.T) {
	e := cudatest.Executor(t)
	r := newRand(t)
	const n = 64 << 20
	src := randomBytes(r, n)
	do(t, e, func() error {
		least, greatest, err := cuda.StreamPriorityRange()
		if err != nil {
			return err
		}
		t.Logf("stream priorities: least %d, greatest %d", least, greatest)
		s1, err := cuda.NewStreamWithPriority(cuda.StreamNonBlocking, greatest)
		if err != nil {
			return err
		}
		defer s1.Destroy()
		s2, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s2.Destroy()
		hin, err := cuda.HostAlloc(n, 0)
		if err != nil {
			return err
		}
		defer hin.Free()
		hout, err := cuda.HostAlloc(n, cuda.HostAllocPortable)
		if err != nil {
			return err
		}
		defer hout.Free()
		copy(hin.Bytes(), src)
		a, err := cuda.MemAlloc(n)
		if err != nil {
			return err
		}
		defer a.Free()
		b, err := cuda.MemAlloc(n)
		if err != nil {
			return err
		}
		defer b.Free()

		start, err := cuda.NewEvent(cuda.EventDefault)
		if err != nil {
			return err
		}
		defer start.Destroy()
		copied, err := cuda.NewEvent(cuda.EventDefault)
		if err != nil {
			return err
		}
		defer copied.Destroy()
		done, err := cuda.NewEvent(cuda.EventDisableTiming)
		if err != nil {
			return err
		}
		defer done.Destroy()

		// s1: H2D into a, record; s2 waits, then memsets and D2D into b,
		// then D2H. Only the event orders the streams.
		if err := start.Record(s1); err != nil {
			return err
		}
		if err := s1.CopyHtoD(a, hin.Bytes()); err != nil {
			return err
		}
		if err := copied.Record(s1); err != nil {
			return err
		}
		if err := s2.WaitEvent(copied); err != nil {
			return err
		}
		v8, v16, v32 := byte(r.Uint32()), uint16(r.Uint32()), r.Uint32()
		if err := s2.MemsetD8(a+100, v8, 3); err != nil {
			return err
		}
		if err := s2.MemsetD16(a+1000, v16, 5); err != nil {
			return err
		}
		if err := s2.MemsetD32(a+2000, v32, 7); err != nil {
			return err
		}
		if err := s2.CopyDtoD(b, a, n); err != nil {
			return err
		}
		if err := s2.CopyDtoH(hout.Bytes(), b); err != nil {
			return err
		}
		if err := done.Record(s2); err != nil {
			return err
		}
		if err := done.Synchronize(); err != nil {
			return err
		}
		if ok, err := done.Query(); !ok || err != nil {
			return fmt.Errorf("Event.Query after Synchronize = %v, %v", ok, err)
		}
		if ok, err := s2.Query(); !ok || err != nil {
			return fmt.Errorf("Stream.Query after the event = %v, %v", ok, err)
		}
		dt, err := cuda.EventElapsedTime(start, copied)
		if err != nil {
			return err
		}
		t.Logf("H2D of %d MiB from pinned memory: %v (%.1f GB/s)", n>>20, dt, float64(n)/dt.Seconds()/1e9)
		if dt <= 0 {
			return fmt.Errorf("EventElapsedTime = %v", dt)
		}
		if _, err := cuda.EventElapsedTime(start, done); err == nil {
			return fmt.Errorf("EventElapsedTime with a DisableTiming event succeeded")
		}
		want := bytes.Clone(src)
		for i := range 3 {
			want[100+i] = v8
		}
		for i := range 5 {
			binary.LittleEndian.PutUint16(want[1000+2*i:], v16)
		}
		for i := range 7 {
			binary.LittleEndian.PutUint32(want[2000+4*i:], v32)
		}
		if !bytes.Equal(hout.Bytes(), want) {
			return fmt.Errorf("async pipeline result differs")
		}
		if err := s1.Destroy(); err != nil {
			return err
		}
		if s1 != 0 {
			return fmt.Errorf("Destroy left %#x", s1)
		}
		return s1.Destroy()
	})
}

func TestStreamOrderedAllocation(t *testing.T) {
	dev := cudatest.MustHaveGPU(t)
	if ok, err := dev.Attribute(cuda.DevAttrMemoryPoolsSupported); err != nil || ok == 0 {
		t.Skipf("device lacks memory pools (%d, %v)", ok, err)
	}
	e := cudatest.Executor(t)
	r := newRand(t)
	const n = 3<<20 + 5
	src := randomBytes(r, n)
	do(t, e, func() error {
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		def, err := dev.DefaultMemPool()
		if err != nil {
			return err
		}
		if err := def.SetReleaseThreshold(64 << 20); err != nil {
			return err
		}
		if th, err := def.ReleaseThreshold(); err != nil || th != 64<<20 {
			return fmt.Errorf("ReleaseThreshold = %d, %v; want %d", th, err, 64<<20)
		}
		pool, err := cuda.NewMemPool(dev)
		if err != nil {
			return err
		}
		defer pool.Destroy()
		if err := pool.SetReleaseThreshold(math.MaxUint64); err != nil {
			return err
		}
		p, err := s.MemAllocAsync(n)
		if err != nil {
			return err
		}
		q, err := s.MemAllocFromPoolAsync(pool, n)
		if err != nil {
			return err
		}
		if err := s.CopyHtoD(p, src); err != nil {
			return err
		}
		if err := s.CopyDtoD(q, p, n); err != nil {
			return err
		}
		got := make([]byte, n)
		if err := s.CopyDtoH(got, q); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if !bytes.Equal(got, src) {
			return fmt.Errorf("stream-ordered round trip differs")
		}
		reserved, used, err := pool.Usage()
		if err != nil {
			return err
		}
		t.Logf("own pool: %d reserved, %d used after one %d-byte allocation", reserved, used, n)
		if used < n || reserved < used {
			return fmt.Errorf("pool.Usage = %d reserved, %d used; want used >= %d", reserved, used, n)
		}
		a, err := q.Attributes()
		if err != nil {
			return err
		}
		if a.MemoryType != cuda.MemoryTypeDevice || a.Start != q {
			return fmt.Errorf("pool allocation attributes %+v", a)
		}
		if err := p.FreeAsync(s); err != nil {
			return err
		}
		if err := q.FreeAsync(s); err != nil {
			return err
		}
		if p != 0 || q != 0 {
			return fmt.Errorf("FreeAsync left %v, %v", p, q)
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if _, used, err := pool.Usage(); err != nil || used != 0 {
			return fmt.Errorf("pool.Usage after free: used %d, %v", used, err)
		}
		if err := pool.TrimTo(0); err != nil {
			return err
		}
		if reserved, _, err := pool.Usage(); err != nil || reserved != 0 {
			return fmt.Errorf("pool.Usage after TrimTo(0): reserved %d, %v", reserved, err)
		}
		if err := pool.Destroy(); err != nil {
			return err
		}
		return pool.Destroy()
	})
}

func TestPinnedAndRegistered(t *testing.T) {
	dev := cudatest.MustHaveGPU(t)
	e := cudatest.Executor(t)
	r := newRand(t)
	const n = 1<<20 + 100
	do(t, e, func() error {
		// Registered Go memory: async copies both ways.
		goMem := randomBytes(r, n)
		want := bytes.Clone(goMem)
		reg, err := cuda.HostRegister(goMem, cuda.HostRegisterPortable)
		if err != nil {
			return err
		}
		defer reg.Free()
		if reg.Len() != n || &reg.Bytes()[0] != &goMem[0] {
			return fmt.Errorf("HostRegister buffer does not alias the slice")
		}
		d, err := cuda.MemAlloc(n)
		if err != nil {
			return err
		}
		defer d.Free()
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		if err := s.CopyHtoD(d, reg.Bytes()); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		clear(goMem)
		if err := s.CopyDtoH(reg.Bytes(), d); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if !bytes.Equal(goMem, want) {
			return fmt.Errorf("registered round trip differs")
		}
		dp, err := reg.DevicePtr()
		if err != nil {
			return err
		}
		a, err := dp.Attributes()
		if err != nil {
			return err
		}
		t.Logf("registered Go memory at %p: device pointer %v, attributes %+v", &goMem[0], dp, a)
		if a.MemoryType != cuda.MemoryTypeHost {
			return fmt.Errorf("registered memory type %d, want host", a.MemoryType)
		}
		if _, err := cuda.HostRegister(goMem, 0); !errors.Is(err, cuda.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
			return fmt.Errorf("registering twice: %v", err)
		}
		if err := reg.Free(); err != nil {
			return err
		}
		if reg.Bytes() != nil || reg.Len() != 0 {
			return fmt.Errorf("Free left a view")
		}
		if err := reg.Free(); err != nil {
			return err
		}

		// Mapped pinned memory: a kernel-visible host address.
		h, err := cuda.HostAlloc(4096, cuda.HostAllocDeviceMap)
		if err != nil {
			return err
		}
		defer h.Free()
		hp, err := h.DevicePtr()
		if err != nil {
			return err
		}
		copy(h.Bytes(), want[:4096])
		if err := cuda.CopyDtoD(d, hp, 4096); err != nil {
			return err
		}
		got := make([]byte, 4096)
		if err := cuda.CopyDtoH(got, d); err != nil {
			return err
		}
		if !bytes.Equal(got, want[:4096]) {
			return fmt.Errorf("copy from mapped pinned memory differs")
		}
		a, err = hp.Attributes()
		if err != nil {
			return err
		}
		if a.MemoryType != cuda.MemoryTypeHost || a.Device != int(dev) {
			return fmt.Errorf("mapped pinned attributes %+v", a)
		}
		return nil
	})
}

// HostMap's memory is page-locked (host memory type, async copies both
// ways at any offset), sized as asked, and Free unregisters and unmaps it.
func TestHostMap(t *testing.T) {
	cudatest.MustHaveGPU(t)
	e := cudatest.Executor(t)
	r := newRand(t)
	for _, n := range []int{1, 4096, 3<<20 + 12345} {
		do(t, e, func() error {
			h, err := cuda.HostMap(n)
			if err != nil {
				return fmt.Errorf("HostMap: %w", err)
			}
			defer h.Free()
			if h.Len() != n || len(h.Bytes()) != n {
				return fmt.Errorf("HostMap(%d): Len %d, len(Bytes) %d", n, h.Len(), len(h.Bytes()))
			}
			want := randomBytes(r, n)
			copy(h.Bytes(), want)
			dp, err := h.DevicePtr()
			if err != nil {
				return fmt.Errorf("DevicePtr: %w", err)
			}
			a, err := dp.Attributes()
			if err != nil {
				return fmt.Errorf("Attributes: %w", err)
			}
			if a.MemoryType != cuda.MemoryTypeHost {
				return fmt.Errorf("HostMap(%d) memory type %d, want host", n, a.MemoryType)
			}
			d, err := cuda.MemAlloc(n + 1)
			if err != nil {
				return err
			}
			defer d.Free()
			s, err := cuda.NewStream(cuda.StreamNonBlocking)
			if err != nil {
				return err
			}
			defer s.Destroy()
			// From an odd offset, so that the copy is not one aligned block.
			if err := s.CopyHtoD(d+1, h.Bytes()[n/3:]); err != nil {
				return fmt.Errorf("CopyHtoD: %w", err)
			}
			clear(h.Bytes())
			if err := s.CopyDtoH(h.Bytes()[n/3:], d+1); err != nil {
				return fmt.Errorf("CopyDtoH: %w", err)
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if !bytes.Equal(h.Bytes()[n/3:], want[n/3:]) || !bytes.Equal(h.Bytes()[:n/3], make([]byte, n/3)) {
				return fmt.Errorf("HostMap(%d) round trip differs", n)
			}
			if err := h.Free(); err != nil {
				return fmt.Errorf("Free: %w", err)
			}
			if h.Bytes() != nil || h.Len() != 0 {
				return fmt.Errorf("Free left a view")
			}
			return h.Free()
		})
	}
}

// CopyHtoDBatch puts every piece where asked (destinations shuffled,
// some empty) and nothing elsewhere.
func TestCopyHtoDBatch(t *testing.T) {
	cudatest.MustHaveGPU(t)
	e := cudatest.Executor(t)
	r := newRand(t)
	const n = 1 << 20
	do(t, e, func() error {
		h, err := cuda.HostMap(n)
		if err != nil {
			return err
		}
		defer h.Free()
		copy(h.Bytes(), randomBytes(r, n))
		d, err := cuda.MemAlloc(2 * n)
		if err != nil {
			return err
		}
		defer d.Free()
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		for round := range 20 {
			if err := s.MemsetD8(d, 0xab, 2*n); err != nil {
				return err
			}
			want := bytes.Repeat([]byte{0xab}, 2*n)
			var copies []cuda.HostCopy
			dst := 0
			for dst < 2*n-4096 && len(copies) < 1+round*20 {
				k := r.IntN(4096)
				if r.IntN(8) == 0 {
					k = 0
				}
				src := r.IntN(n - k)
				copies = append(copies, cuda.HostCopy{Dst: d + cuda.DevicePtr(dst), Src: h.Bytes()[src : src+k]})
				copy(want[dst:], h.Bytes()[src:src+k])
				dst += k + r.IntN(64)
			}
			r.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
			if err := s.CopyHtoDBatch(copies); err != nil {
				return fmt.Errorf("round %d, %d copies: %w", round, len(copies), err)
			}
			got := make([]byte, 2*n)
			if err := s.CopyDtoH(got, d); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			if i := firstDiffAt(got, want); i >= 0 {
				return fmt.Errorf("round %d, %d copies: byte %d is %#x, want %#x", round, len(copies), i, got[i], want[i])
			}
		}
		return nil
	})
}

// firstDiffAt returns the first index where a and b differ, or -1.
func firstDiffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func TestPointerAttributes(t *testing.T) {
	dev := cudatest.MustHaveGPU(t)
	e := cudatest.Executor(t)
	do(t, e, func() error {
		const n = 1 << 20
		p, err := cuda.MemAlloc(n)
		if err != nil {
			return err
		}
		defer p.Free()
		a, err := (p + 12345).Attributes()
		if err != nil {
			return err
		}
		want := cuda.PointerAttributes{MemoryType: cuda.MemoryTypeDevice, Device: int(dev), Start: p, Size: n}
		if a != want {
			return fmt.Errorf("Attributes(%v+12345) = %+v, want %+v", p, a, want)
		}
		goMem := make([]byte, 64)
		_, err = cuda.DevicePtr(uintptr(unsafe.Pointer(&goMem[0]))).Attributes()
		runtime.KeepAlive(goMem)
		t.Logf("attributes of ordinary Go memory: %v", err)
		if err == nil {
			return fmt.Errorf("Attributes of unregistered Go memory succeeded")
		}
		return nil
	})
}

func loadKernels(t *testing.T) []byte {
	ptx, err := os.ReadFile("testdata/kernels.ptx")
	if err != nil {
		t.Fatal(err)
	}
	return ptx
}

// axpbParams is the kernel axpb's struct parameter.
type axpbParams struct {
	_    structs.HostLayout
	out  cuda.DevicePtr
	in   cuda.DevicePtr
	a, b float32
	n    uint32
	_    uint32
}

func TestModuleLaunch(t *testing.T) {
	e := cudatest.Executor(t)
	ptx := loadKernels(t)
	r := newRand(t)
	const n = 100003
	x := make([]float32, n)
	y := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*200 - 100
		y[i] = r.Float32()*200 - 100
	}
	do(t, e, func() error {
		m, err := cuda.LoadModule(ptx)
		if err != nil {
			return err
		}
		defer m.Unload()
		vecadd, err := m.Function("vecadd")
		if err != nil {
			return err
		}
		axpb, err := m.Function("axpb")
		if err != nil {
			return err
		}
		scalars, err := m.Function("scalars")
		if err != nil {
			return err
		}
		maxThreads, err := vecadd.Attribute(cuda.FuncAttrMaxThreadsPerBlock)
		if err != nil {
			return err
		}
		regs, err := vecadd.Attribute(cuda.FuncAttrNumRegs)
		if err != nil {
			return err
		}
		ptxv, err := vecadd.Attribute(cuda.FuncAttrPTXVersion)
		if err != nil {
			return err
		}
		t.Logf("vecadd: max %d threads per block, %d registers, PTX target %d", maxThreads, regs, ptxv)
		if maxThreads < 256 || ptxv != 75 {
			return fmt.Errorf("vecadd attributes: max threads %d, PTX target %d", maxThreads, ptxv)
		}

		bytesOf := func(f []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f)) }
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		var bufs [4]cuda.DevicePtr
		for i := range bufs {
			if bufs[i], err = cuda.MemAlloc(4 * n); err != nil {
				return err
			}
			defer bufs[i].Free()
		}
		a, b, c, o := bufs[0], bufs[1], bufs[2], bufs[3]
		if err := cuda.CopyHtoD(a, bytesOf(x)); err != nil {
			return err
		}
		if err := cuda.CopyHtoD(b, bytesOf(y)); err != nil {
			return err
		}
		grid := cuda.Dim3{X: (n + 255) / 256}
		if err := vecadd.Launch(grid, cuda.Dim3{X: 256}, 0, s, a, b, c, uint32(n)); err != nil {
			return err
		}
		alpha, beta := r.Float32()*4-2, r.Float32()*10-5
		p := &axpbParams{out: o, in: c, a: alpha, b: beta, n: n}
		if err := axpb.Launch(grid, cuda.Dim3{X: 256}, 0, s, p); err != nil {
			return err
		}
		got := make([]float32, n)
		if err := s.CopyDtoH(bytesOf(got), o); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		bad := 0
		for i := range got {
			want := float32(alpha*(x[i]+y[i])) + beta
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				if bad < 5 {
					t.Errorf("element %d: got %g, want %g", i, got[i], want)
				}
				bad++
			}
		}
		if bad > 0 {
			return fmt.Errorf("%d of %d elements wrong", bad, n)
		}

		// Every scalar kind in its own parameter slot.
		sa, sb, sc, sd := uint8(r.Uint32()), int16(-1-r.IntN(1000)), r.Uint32(), -r.Int64()
		se, sf := r.Float32(), r.Float64()
		if err := scalars.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, s, o, sa, sb, sc, sd, se, sf); err != nil {
			return err
		}
		out := make([]byte, 48)
		if err := s.CopyDtoH(out, o); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		le := binary.LittleEndian
		if le.Uint64(out) != uint64(sa) || int64(le.Uint64(out[8:])) != int64(sb) || le.Uint64(out[16:]) != uint64(sc) ||
			int64(le.Uint64(out[24:])) != sd || math.Float32frombits(le.Uint32(out[32:])) != se || math.Float64frombits(le.Uint64(out[40:])) != sf {
			return fmt.Errorf("scalars kernel stored %x for %d %d %d %d %g %g", out, sa, sb, sc, sd, se, sf)
		}

		// A module global.
		g, size, err := m.Global("magic")
		if err != nil {
			return err
		}
		word := make([]byte, 4)
		if err := cuda.CopyDtoH(word, g); err != nil {
			return err
		}
		if size != 4 || le.Uint32(word) != 0x12345678 {
			return fmt.Errorf("global magic: size %d, value %#x", size, le.Uint32(word))
		}

		// Bad names and arguments.
		if _, err := m.Function("nope"); !errors.Is(err, cuda.CUDA_ERROR_NOT_FOUND) || !strings.Contains(err.Error(), `"nope"`) {
			return fmt.Errorf(`Function("nope"): %v`, err)
		}
		var le2 *cuda.LaunchError
		err = vecadd.Launch(grid, cuda.Dim3{X: 256}, 0, s, a, b, c, n)
		if !errors.As(err, &le2) || le2.Index != 3 {
			return fmt.Errorf("launch with an untyped int: %v", err)
		}
		t.Logf("int argument: %v", err)
		err = vecadd.Launch(grid, cuda.Dim3{X: 4096}, 0, s, a, b, c, uint32(n))
		if !errors.Is(err, cuda.CUDA_ERROR_INVALID_VALUE) {
			return fmt.Errorf("launch with 4096 threads per block: %v", err)
		}
		t.Logf("oversized block: %v", err)
		if err := m.Unload(); err != nil {
			return err
		}
		return m.Unload()
	})
}

func TestModuleJITError(t *testing.T) {
	e := cudatest.Executor(t)
	broken := []byte(".version 7.0\n.target sm_75\n.address_size 64\n\n" +
		".visible .entry broken(.param .u64 p)\n{\n\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [p];\n\tfrobnicate.u64 %rd1, %rd1;\n\tret;\n}\n")
	do(t, e, func() error {
		m, err := cuda.LoadModule(broken)
		if err == nil {
			m.Unload()
			return fmt.Errorf("broken PTX loaded")
		}
		t.Logf("broken PTX: %v", err)
		var ce *cuda.Error
		if !errors.As(err, &ce) || ce.Op != "cuModuleLoadDataEx" || !errors.Is(err, cuda.ErrInvalidPTX) {
			return fmt.Errorf("broken PTX error %#v does not match ErrInvalidPTX", err)
		}
		if !strings.Contains(ce.Log, "frobnicate") && !strings.Contains(ce.Log, "line 8") {
			return fmt.Errorf("JIT log %q does not point at the bad instruction", ce.Log)
		}
		future := bytes.Replace(loadKernels(t), []byte(".version 7.0"), []byte(".version 99.9"), 1)
		if _, err := cuda.LoadModule(future); !errors.Is(err, cuda.ErrInvalidPTX) {
			return fmt.Errorf("PTX ISA 99.9: %v", err)
		} else {
			t.Logf("PTX ISA 99.9: %v", err)
		}
		return nil
	})
}

func TestErrors(t *testing.T) {
	dev := cudatest.MustHaveGPU(t)
	e := cudatest.Executor(t)
	if _, err := cuda.GetDevice(4096); !errors.Is(err, cuda.ErrNoDevice) {
		t.Errorf("GetDevice(4096) = %v, want ErrNoDevice", err)
	} else {
		t.Logf("GetDevice(4096): %v", err)
	}
	do(t, e, func() error {
		total, err := dev.TotalMem()
		if err != nil {
			return err
		}
		p, err := cuda.MemAlloc(4 * total)
		if err == nil {
			p.Free()
			return fmt.Errorf("MemAlloc of 4x the device memory succeeded")
		}
		t.Logf("MemAlloc(4 x total): %v", err)
		if !errors.Is(err, cuda.ErrOutOfMemory) || !strings.HasPrefix(err.Error(), "cuda: cuMemAlloc_v2 ") ||
			!strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY (out of memory)") {
			return fmt.Errorf("MemAlloc error %q", err)
		}
		var ev cuda.Event
		err = ev.Record(0)
		t.Logf("Record on a zero event: %v", err)
		if err == nil {
			return fmt.Errorf("recording a zero Event succeeded")
		}
		return nil
	})
	// A goroutine whose thread has no context current.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cuda.Context(0).SetCurrent(); err != nil {
			errc <- err
			return
		}
		_, err := cuda.MemAlloc(16)
		errc <- err
	}()
	if err := <-errc; !errors.Is(err, cuda.ErrInvalidContext) {
		t.Errorf("MemAlloc without a context = %v, want ErrInvalidContext", err)
	} else {
		t.Logf("MemAlloc without a context: %v", err)
	}
}

func TestQueryNotReady(t *testing.T) {
	e := cudatest.Executor(t)
	ptx := loadKernels(t)
	do(t, e, func() error {
		m, err := cuda.LoadModule(ptx)
		if err != nil {
			return err
		}
		defer m.Unload()
		spin, err := m.Function("spin")
		if err != nil {
			return err
		}
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
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
		if err := start.Record(s); err != nil {
			return err
		}
		if err := spin.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, s, uint64(300_000_000)); err != nil {
			return err
		}
		if err := end.Record(s); err != nil {
			return err
		}
		done, err := s.Query()
		if err != nil || done {
			return fmt.Errorf("Stream.Query during a spin = %v, %v; want false, nil", done, err)
		}
		done, err = end.Query()
		if err != nil || done {
			return fmt.Errorf("Event.Query during a spin = %v, %v; want false, nil", done, err)
		}
		if _, err := cuda.EventElapsedTime(start, end); !errors.Is(err, cuda.ErrNotReady) {
			return fmt.Errorf("EventElapsedTime before completion = %v, want ErrNotReady", err)
		}
		if err := end.Synchronize(); err != nil {
			return err
		}
		dt, err := cuda.EventElapsedTime(start, end)
		if err != nil {
			return err
		}
		t.Logf("spin of 3e8 cycles: %v", dt)
		if dt < time.Millisecond {
			return fmt.Errorf("spin took %v", dt)
		}
		done, err = s.Query()
		if err != nil || !done {
			return fmt.Errorf("Stream.Query after sync = %v, %v", done, err)
		}
		return nil
	})
}

// TestIPC exports an allocation and has another process (python3 with
// cupy) open the handle and return what it reads.
func TestIPC(t *testing.T) {
	e := cudatest.Executor(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("IPC open needs another process: no python3")
	}
	if err := exec.Command(py, "-c", "import cupy").Run(); err != nil {
		t.Skipf("IPC open needs another process: python3 cannot import cupy (%v)", err)
	}
	r := newRand(t)
	const n = 1 << 16
	const off = 4096
	src := randomBytes(r, n)
	var p cuda.DevicePtr
	var h cuda.IPCMemHandle
	do(t, e, func() error {
		var err error
		if p, err = cuda.MemAlloc(off + n); err != nil {
			return err
		}
		if err := cuda.CopyHtoD(p+off, src); err != nil {
			return err
		}
		h, err = (p + off).IPCHandle()
		if err != nil {
			return err
		}
		a, err := (p + off).Attributes()
		if err != nil {
			return err
		}
		if a.Start != p {
			return fmt.Errorf("range start %v, want %v", a.Start, p)
		}
		return nil
	})
	defer e.Do(p.Free)
	script := `
import sys, cupy
h = bytes.fromhex(sys.argv[1]); off = int(sys.argv[2]); n = int(sys.argv[3])
ptr = cupy.cuda.runtime.ipcOpenMemHandle(h)
mem = cupy.cuda.UnownedMemory(ptr, off + n, None)
a = cupy.ndarray((n,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, off))
sys.stdout.write(a.get().tobytes().hex())
a[:] = 255 - a
cupy.cuda.runtime.deviceSynchronize()
cupy.cuda.runtime.ipcCloseMemHandle(ptr)
`
	out, err := exec.Command(py, "-c", script, hex.EncodeToString(h.Reserved[:]), fmt.Sprint(off), fmt.Sprint(n)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("python IPC consumer: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	got, err := hex.DecodeString(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("the other process read different bytes")
	}
	back := make([]byte, n)
	do(t, e, func() error { return cuda.CopyDtoH(back, p+off) })
	for i := range back {
		if back[i] != 255-src[i] {
			t.Fatalf("byte %d: the other process's write is not visible (%d, want %d)", i, back[i], 255-src[i])
		}
	}
	t.Logf("cupy in another process read and inverted %d bytes through the IPC handle", n)
}

// TestExecutorConcurrent drives one executor, and worker threads that lock
// the context themselves, from many goroutines at once.
func TestExecutorConcurrent(t *testing.T) {
	e := cudatest.Executor(t)
	ptx := loadKernels(t)
	var vecadd cuda.Function
	var m cuda.Module
	do(t, e, func() error {
		var err error
		if m, err = cuda.LoadModule(ptx); err != nil {
			return err
		}
		vecadd, err = m.Function("vecadd")
		return err
	})
	defer e.Do(m.Unload)
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			n := 1000 + r.IntN(50000)
			x := make([]float32, n)
			y := make([]float32, n)
			for i := range x {
				x[i], y[i] = r.Float32(), r.Float32()
			}
			got := make([]float32, n)
			bytesOf := func(f []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f)) }
			job := func() error {
				s, err := cuda.NewStream(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer s.Destroy()
				var bufs [3]cuda.DevicePtr
				for i := range bufs {
					if bufs[i], err = s.MemAllocAsync(4 * n); err != nil {
						return err
					}
					defer bufs[i].FreeAsync(s)
				}
				if err := s.CopyHtoD(bufs[0], bytesOf(x)); err != nil {
					return err
				}
				if err := s.CopyHtoD(bufs[1], bytesOf(y)); err != nil {
					return err
				}
				if err := vecadd.Launch(cuda.Dim3{X: uint32(n+127) / 128}, cuda.Dim3{X: 128}, 0, s, bufs[0], bufs[1], bufs[2], uint32(n)); err != nil {
					return err
				}
				if err := s.CopyDtoH(bytesOf(got), bufs[2]); err != nil {
					return err
				}
				return s.Synchronize()
			}
			for round := range 8 {
				clear(got)
				var err error
				if w%2 == 0 {
					err = e.Do(job)
				} else {
					// a worker that calls the driver on its own thread
					var unlock func()
					if unlock, err = cuda.LockThread(e.Context()); err == nil {
						err = job()
						unlock()
					}
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, round, err)
					return
				}
				for i := range got {
					if got[i] != x[i]+y[i] {
						errs <- fmt.Errorf("worker %d round %d: element %d = %g, want %g", w, round, i, got[i], x[i]+y[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestNoDriverSkips runs this test binary again with $DAMACY_LIBCUDA
// naming a library that does not exist: GPU tests must skip, saying which
// library is missing, and the binary must pass.
func TestNoDriverSkips(t *testing.T) {
	if os.Getenv(cuda.LibraryEnv) == "libcuda-absent.so.1" {
		t.Skip("already the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^(TestFoundation|TestExecutorConcurrent)$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), cuda.LibraryEnv+"=libcuda-absent.so.1", cudatest.RequireEnv+"=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child test binary: %v\n%s", err, out)
	}
	for _, want := range []string{"--- SKIP: TestFoundation", "--- SKIP: TestExecutorConcurrent", "libcuda-absent.so.1: cannot open shared object file"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

func TestExecutorClose(t *testing.T) {
	dev := cudatest.MustHaveGPU(t)
	e, err := cuda.NewExecutor(dev)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := e.Do(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do = %v, ran %v", err, ran)
	}
	want := errors.New("from f")
	if err := e.Do(func() error { return want }); err != want {
		t.Fatalf("Do returned %v, want f's error", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := e.Do(func() error { t.Error("f ran after Close"); return nil }); !errors.Is(err, cuda.ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
}

// BenchmarkExecutorDo measures handing an empty function to the executor
// and waiting for it.
func BenchmarkExecutorDo(b *testing.B) {
	e := cudatest.Executor(b)
	f := func() error { return nil }
	for b.Loop() {
		e.Do(f)
	}
}

// BenchmarkStreamQuery measures one cheap driver call (cuStreamQuery on an
// idle stream) through purego.
func BenchmarkStreamQuery(b *testing.B) {
	e := cudatest.Executor(b)
	var s cuda.Stream
	if err := e.Do(func() (err error) { s, err = cuda.NewStream(cuda.StreamNonBlocking); return err }); err != nil {
		b.Fatal(err)
	}
	defer e.Do(s.Destroy)
	b.ReportAllocs()
	for b.Loop() {
		if done, err := s.Query(); !done || err != nil {
			b.Fatal(done, err)
		}
	}
}

// BenchmarkLaunchGPU measures Launch of a 4-parameter kernel on one
// block, synchronising every 256 launches so the queue never fills.
func BenchmarkLaunchGPU(b *testing.B) {
	e := cudatest.Executor(b)
	ptx, err := os.ReadFile("testdata/kernels.ptx")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	err = e.Do(func() error {
		m, err := cuda.LoadModule(ptx)
		if err != nil {
			return err
		}
		defer m.Unload()
		f, err := m.Function("vecadd")
		if err != nil {
			return err
		}
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		p, err := cuda.MemAlloc(3 * 1024)
		if err != nil {
			return err
		}
		defer p.Free()
		i := 0
		for b.Loop() {
			if err := f.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 256}, 0, s, p, p+1024, p+2048, uint32(256)); err != nil {
				return err
			}
			if i++; i%256 == 0 {
				if err := s.Synchronize(); err != nil {
					return err
				}
			}
		}
		return s.Synchronize()
	})
	if err != nil {
		b.Fatal(err)
	}
}

// ipcChildEnv carries "handle-hex offset n" to TestIPCOpenChild.
const ipcChildEnv = "CUDA_TEST_IPC_CHILD"

// TestIPCOpenChild is the other process of TestIPCOpen: it opens the
// handle with OpenIPCMemHandle, prints the bytes it reads, and writes
// them back inverted. It does nothing in a normal run.
func TestIPCOpenChild(t *testing.T) {
	arg := os.Getenv(ipcChildEnv)
	if arg == "" {
		t.Skip("runs only as TestIPCOpen's child process")
	}
	var hexHandle string
	var off, n int
	if _, err := fmt.Sscan(arg, &hexHandle, &off, &n); err != nil {
		t.Fatal(err)
	}
	raw, err := hex.DecodeString(hexHandle)
	if err != nil || len(raw) != 64 {
		t.Fatalf("bad handle %q", hexHandle)
	}
	var h cuda.IPCMemHandle
	copy(h.Reserved[:], raw)
	e := cudatest.Executor(t)
	do(t, e, func() error {
		p, err := cuda.OpenIPCMemHandle(h, cuda.IPCMemLazyEnablePeerAccess)
		if err != nil {
			return err
		}
		b := make([]byte, n)
		if err := cuda.CopyDtoH(b, p+cuda.DevicePtr(off)); err != nil {
			return err
		}
		fmt.Printf("IPC-DATA %x\n", b)
		for i := range b {
			b[i] = 255 - b[i]
		}
		if err := cuda.CopyHtoD(p+cuda.DevicePtr(off), b); err != nil {
			return err
		}
		if err := cuda.CloseIPCMemHandle(&p); err != nil {
			return err
		}
		return cuda.CloseIPCMemHandle(&p)
	})
}

// TestIPCOpen exports an allocation and has a child process (this test
// binary) open it through OpenIPCMemHandle, which takes the 64-byte
// handle by value.
func TestIPCOpen(t *testing.T) {
	if os.Getenv(ipcChildEnv) != "" {
		t.Skip("in the child")
	}
	e := cudatest.Executor(t)
	r := newRand(t)
	const n, off = 10000, 512
	src := randomBytes(r, n)
	var p cuda.DevicePtr
	var h cuda.IPCMemHandle
	do(t, e, func() (err error) {
		if p, err = cuda.MemAlloc(off + n); err != nil {
			return err
		}
		if err := cuda.CopyHtoD(p+off, src); err != nil {
			return err
		}
		// Opening a handle in its own process is refused.
		h, err = p.IPCHandle()
		if err != nil {
			return err
		}
		if q, err := cuda.OpenIPCMemHandle(h, cuda.IPCMemLazyEnablePeerAccess); err == nil {
			cuda.CloseIPCMemHandle(&q)
			return fmt.Errorf("OpenIPCMemHandle in the exporting process succeeded")
		} else {
			t.Logf("opening in the same process: %v", err)
		}
		return nil
	})
	defer e.Do(p.Free)
	cmd := exec.Command(os.Args[0], "-test.run=^TestIPCOpenChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x %d %d", ipcChildEnv, h.Reserved, off, n))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, after, ok := bytes.Cut(out, []byte("IPC-DATA "))
	if !ok || !bytes.Contains(out, []byte("--- PASS: TestIPCOpenChild")) {
		t.Fatalf("child did not report data:\n%s", out)
	}
	line, _, _ := bytes.Cut(after, []byte("\n"))
	got, err := hex.DecodeString(string(line))
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("child read %d bytes (%v), not what was written", len(got), err)
	}
	back := make([]byte, n)
	do(t, e, func() error { return cuda.CopyDtoH(back, p+off) })
	for i := range back {
		if back[i] != 255-src[i] {
			t.Fatalf("byte %d: the child's write is not visible", i)
		}
	}
	t.Logf("a child process opened the handle with OpenIPCMemHandle, read and inverted %d bytes", n)
}
