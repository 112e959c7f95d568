package cuda

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"structs"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// TestStructLayout checks the Go mirrors of the C structs passed to the
// driver against cuda.h's layouts.
func TestStructLayout(t *testing.T) {
	var p memPoolProps
	for _, tt := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUmemPoolProps)", unsafe.Sizeof(p), 88},
		{"offsetof(allocType)", unsafe.Offsetof(p.allocType), 0},
		{"offsetof(handleTypes)", unsafe.Offsetof(p.handleTypes), 4},
		{"offsetof(location.type)", unsafe.Offsetof(p.locType), 8},
		{"offsetof(location.id)", unsafe.Offsetof(p.locID), 12},
		{"offsetof(win32SecurityAttributes)", unsafe.Offsetof(p.win32SecurityAttributes), 16},
		{"offsetof(maxSize)", unsafe.Offsetof(p.maxSize), 24},
		{"offsetof(usage)", unsafe.Offsetof(p.usage), 32},
		{"sizeof(CUipcMemHandle)", unsafe.Sizeof(IPCMemHandle{}), 64},
		{"sizeof(CUipcEventHandle)", unsafe.Sizeof(IPCEventHandle{}), 64},
		{"sizeof(CUuuid)", unsafe.Sizeof(UUID{}), 16},
		{"sizeof(CUdevice)", unsafe.Sizeof(Device(0)), 4},
		{"sizeof(CUresult)", unsafe.Sizeof(Result(0)), 4},
		{"sizeof(CUjit_option)", unsafe.Sizeof(jitOption(0)), 4},
		{"sizeof(CUdeviceptr)", unsafe.Sizeof(DevicePtr(0)), 8},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

// standin builds testdata/standin.c into a shared library and opens it,
// or skips when there is no C compiler.
func standin(t testing.TB) uintptr {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build the ABI stand-ins")
	}
	so := filepath.Join(t.TempDir(), "standin.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, "testdata/standin.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { purego.Dlclose(h) })
	return h
}

func bindStandin(t testing.TB, h uintptr, name string, fn any) {
	t.Helper()
	addr, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	purego.RegisterFunc(fn, addr)
}

// TestIPCHandleByValue passes a 64-byte handle by value, as
// cuIpcOpenMemHandle_v2 takes it, to a C function with that prototype.
func TestIPCHandleByValue(t *testing.T) {
	h := standin(t)
	var d driver
	bindStandin(t, h, "cuIpcOpenMemHandle_v2", &d.cuIpcOpenMemHandle_v2)
	var got func(handle *byte, flags *uint32)
	bindStandin(t, h, "standin_ipc", &got)
	r := rand.New(rand.NewPCG(rand.Uint64(), 1))
	for range 10 {
		var handle IPCMemHandle
		for i := range handle.Reserved {
			handle.Reserved[i] = byte(r.Uint32())
		}
		flags := IPCMemFlags(r.Uint32())
		var p DevicePtr
		if res := d.cuIpcOpenMemHandle_v2(&p, handle, flags); res != CUDA_SUCCESS || p != 0xabcdef0123 {
			t.Fatalf("stand-in returned %v, %v", res, p)
		}
		var back [64]byte
		var backFlags uint32
		got(&back[0], &backFlags)
		if back != handle.Reserved || backFlags != uint32(flags) {
			t.Fatalf("C received handle %x flags %#x; sent %x flags %#x", back, backFlags, handle.Reserved, flags)
		}
	}
}

// TestIPCEventHandleByValue passes a 64-byte event handle by value, as
// cuIpcOpenEventHandle takes it, to a C function with that prototype.
func TestIPCEventHandleByValue(t *testing.T) {
	h := standin(t)
	var d driver
	bindStandin(t, h, "cuIpcOpenEventHandle", &d.cuIpcOpenEventHandle)
	var got func(handle *byte)
	bindStandin(t, h, "standin_ipc_event", &got)
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for range 10 {
		var handle IPCEventHandle
		for i := range handle.Reserved {
			handle.Reserved[i] = byte(r.Uint32())
		}
		var e Event
		if res := d.cuIpcOpenEventHandle(&e, handle); res != CUDA_SUCCESS || e != 0x5eed0e7e17 {
			t.Fatalf("stand-in returned %v, %#x", res, e)
		}
		var back [64]byte
		got(&back[0])
		if back != handle.Reserved {
			t.Fatalf("C received handle %x; sent %x", back, handle.Reserved)
		}
	}
}

type testParams struct {
	_    structs.HostLayout
	out  DevicePtr
	in   DevicePtr
	a, b float32
	n    uint32
	_    uint32
}

// TestLaunchMarshalling launches through a C cuLaunchKernel stand-in that
// copies each kernel parameter by its C size, and checks what arrived.
func TestLaunchMarshalling(t *testing.T) {
	h := standin(t)
	var d driver
	bindStandin(t, h, "cuLaunchKernel", &d.cuLaunchKernel)
	var setSizes func(sizes *uint32, n int32)
	var got func(params *byte, dims *uint32, f, stream, extra *uintptr)
	bindStandin(t, h, "standin_set_sizes", &setSizes)
	bindStandin(t, h, "standin_launch", &got)

	r := rand.New(rand.NewPCG(rand.Uint64(), 2))
	sp := &testParams{out: DevicePtr(r.Uint64()), in: DevicePtr(r.Uint64()), a: r.Float32(), b: -r.Float32(), n: r.Uint32()}
	args := []any{
		DevicePtr(r.Uint64()), uintptr(r.Uint64()), int8(-3), uint8(r.Uint32()), int16(-1234), uint16(r.Uint32()),
		int32(-r.Int32()), r.Uint32(), -r.Int64(), r.Uint64(), r.Float32(), r.NormFloat64(), sp,
	}
	var want []byte
	le := binary.LittleEndian
	var sizes []uint32
	for _, a := range args {
		before := len(want)
		switch v := a.(type) {
		case DevicePtr:
			want = le.AppendUint64(want, uint64(v))
		case uintptr:
			want = le.AppendUint64(want, uint64(v))
		case int8:
			want = append(want, byte(v))
		case uint8:
			want = append(want, v)
		case int16:
			want = le.AppendUint16(want, uint16(v))
		case uint16:
			want = le.AppendUint16(want, v)
		case int32:
			want = le.AppendUint32(want, uint32(v))
		case uint32:
			want = le.AppendUint32(want, v)
		case int64:
			want = le.AppendUint64(want, uint64(v))
		case uint64:
			want = le.AppendUint64(want, v)
		case float32:
			want = le.AppendUint32(want, math.Float32bits(v))
		case float64:
			want = le.AppendUint64(want, math.Float64bits(v))
		case *testParams:
			want = le.AppendUint64(want, uint64(v.out))
			want = le.AppendUint64(want, uint64(v.in))
			want = le.AppendUint32(want, math.Float32bits(v.a))
			want = le.AppendUint32(want, math.Float32bits(v.b))
			want = le.AppendUint32(want, v.n)
			want = le.AppendUint32(want, 0)
		}
		sizes = append(sizes, uint32(len(want)-before))
	}
	setSizes(&sizes[0], int32(len(sizes)))
	grid, block := Dim3{X: 7, Y: 3}.norm(), Dim3{X: 128}.norm()
	if err := d.launch(Function(0x1234), grid, block, 4096, Stream(0x5678), args); err != nil {
		t.Fatal(err)
	}
	params := make([]byte, 4096)
	var dims [7]uint32
	var f, s, extra uintptr
	got(&params[0], &dims[0], &f, &s, &extra)
	if dims != [7]uint32{7, 3, 1, 128, 1, 1, 4096} || f != 0x1234 || s != 0x5678 || extra != 0 {
		t.Errorf("C received dims %v, f %#x, stream %#x, extra %#x", dims, f, s, extra)
	}
	if !bytes.Equal(params[:len(want)], want) {
		t.Errorf("C received parameters\n%x\nwant\n%x", params[:len(want)], want)
	}
}

func TestLaunchArgErrors(t *testing.T) {
	type noLayout struct{ a, b uint32 }
	type withPointer struct {
		_ structs.HostLayout
		p *int
	}
	type withInt struct {
		_ structs.HostLayout
		n int
	}
	var nilParams *testParams
	for i, a := range []any{
		int(1), uint(1), "s", []byte{1}, &noLayout{}, &withPointer{}, &withInt{}, nilParams, testParams{}, true,
	} {
		if _, err := argSize(i, a); err == nil {
			t.Errorf("argSize(%T) accepted it", a)
		} else if le, ok := err.(*LaunchError); !ok || le.Index != i {
			t.Errorf("argSize(%T) = %v, want a *LaunchError for index %d", a, err, i)
		}
	}
	if n, err := argSize(0, &testParams{}); n != 32 || err != nil {
		t.Errorf("argSize(*testParams) = %d, %v; want 32, nil", n, err)
	}
}

// BenchmarkLaunchStandin measures the host cost of one launch of a
// 4-parameter kernel: marshalling plus the purego call, into a C stand-in.
func BenchmarkLaunchStandin(b *testing.B) {
	h := standin(b)
	var d driver
	bindStandin(b, h, "cuLaunchKernel", &d.cuLaunchKernel)
	var setSizes func(sizes *uint32, n int32)
	bindStandin(b, h, "standin_set_sizes", &setSizes)
	sizes := []uint32{8, 8, 8, 4}
	setSizes(&sizes[0], int32(len(sizes)))
	grid, block := Dim3{X: 1000}.norm(), Dim3{X: 256}.norm()
	b.ReportAllocs()
	for b.Loop() {
		if err := d.launch(1, grid, block, 0, 2, []any{DevicePtr(1 << 40), DevicePtr(2 << 40), DevicePtr(3 << 40), uint32(1000)}); err != nil {
			b.Fatal(err)
		}
	}
}
