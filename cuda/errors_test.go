package cuda

import (
	"errors"
	"fmt"
	"testing"
)

var resultTests = []struct {
	r          Result
	str, error string
}{
	{CUDA_SUCCESS, "CUDA_SUCCESS", "CUDA_SUCCESS (no error)"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_INVALID_VALUE (invalid argument)"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"},
	{CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_CONTEXT (invalid device context)"},
	{CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)"},
	{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "CUDA_ERROR_NOT_READY (device not ready)"},
	{CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"},
	{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_NOT_SUPPORTED (operation not supported)"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "CUDA_ERROR_UNKNOWN (unknown error)"},
	{Result(12345), "CUresult(12345)", "CUresult(12345)"},
	{Result(-1), "CUresult(-1)", "CUresult(-1)"},
}

func TestResultString(t *testing.T) {
	for _, tt := range resultTests {
		if got := tt.r.String(); got != tt.str {
			t.Errorf("Result(%d).String() = %q, want %q", int32(tt.r), got, tt.str)
		}
		if got := tt.r.Error(); got != tt.error {
			t.Errorf("Result(%d).Error() = %q, want %q", int32(tt.r), got, tt.error)
		}
	}
}

func TestResultTableSorted(t *testing.T) {
	if len(resultTable) < 90 {
		t.Errorf("resultTable has %d codes; cuda.h 13.0 names over 90", len(resultTable))
	}
	for i, e := range resultTable {
		if i > 0 && resultTable[i-1].code >= e.code {
			t.Errorf("resultTable[%d] = %d after %d: not sorted", i, e.code, resultTable[i-1].code)
		}
		if got := e.code.String(); got != e.name {
			t.Errorf("Result(%d).String() = %q, want %q (table lookup)", e.code, got, e.name)
		}
		if e.desc == "" {
			t.Errorf("%s has no description", e.name)
		}
	}
}

var isTests = []struct {
	r      Result
	target error
	want   bool
}{
	{CUDA_ERROR_OUT_OF_MEMORY, ErrOutOfMemory, true},
	{CUDA_ERROR_OUT_OF_MEMORY, ErrNoDevice, false},
	{CUDA_ERROR_NO_DEVICE, ErrNoDevice, true},
	{CUDA_ERROR_INVALID_DEVICE, ErrNoDevice, true},
	{CUDA_ERROR_STUB_LIBRARY, ErrNoDriver, true},
	{CUDA_ERROR_NOT_READY, ErrNotReady, true},
	{CUDA_ERROR_INVALID_CONTEXT, ErrInvalidContext, true},
	{CUDA_ERROR_NOT_SUPPORTED, ErrUnsupported, true},
	{CUDA_ERROR_NOT_SUPPORTED, errors.ErrUnsupported, true},
	{CUDA_ERROR_INVALID_VALUE, ErrUnsupported, false},
	{CUDA_ERROR_INVALID_PTX, ErrInvalidPTX, true},
	{CUDA_ERROR_UNSUPPORTED_PTX_VERSION, ErrInvalidPTX, true},
	{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE, true},
	{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, false},
}

func TestErrorIs(t *testing.T) {
	for _, tt := range isTests {
		err := error(&Error{Op: "cuTest", Code: tt.r})
		if got := errors.Is(err, tt.target); got != tt.want {
			t.Errorf("errors.Is(&Error{%v}, %v) = %v, want %v", tt.r, tt.target, got, tt.want)
		}
		wrapped := fmt.Errorf("pipeline: decode: %w", err)
		if got := errors.Is(wrapped, tt.target); got != tt.want {
			t.Errorf("errors.Is(wrapped %v, %v) = %v, want %v", tt.r, tt.target, got, tt.want)
		}
	}
	var r Result
	if !errors.As(fmt.Errorf("x: %w", &Error{Op: "cuInit", Code: CUDA_ERROR_NO_DEVICE}), &r) || r != CUDA_ERROR_NO_DEVICE {
		t.Errorf("errors.As to Result = %v", r)
	}
}

var errorTests = []struct {
	err  error
	want string
}{
	{&Error{Op: "cuMemAlloc_v2", Code: CUDA_ERROR_OUT_OF_MEMORY}, "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"},
	{&Error{Op: "cuMemAlloc_v2", Arg: bytesArg(1 << 40), Code: CUDA_ERROR_OUT_OF_MEMORY}, "cuda: cuMemAlloc_v2 1099511627776 bytes: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"},
	{&Error{Op: "cuModuleGetFunction", Arg: `"vecadd"`, Code: CUDA_ERROR_NOT_FOUND}, `cuda: cuModuleGetFunction "vecadd": CUDA_ERROR_NOT_FOUND (named symbol not found)`},
	{&Error{Op: "cuModuleLoadDataEx", Code: CUDA_ERROR_INVALID_PTX, Log: "ptxas application ptx input, line 8; error"}, "cuda: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed): ptxas application ptx input, line 8; error"},
	{&Error{Op: "cuInit", Code: Result(7777)}, "cuda: cuInit: CUresult(7777)"},
	{&UnsupportedError{Op: "cuMemAllocAsync"}, "cuda: cuMemAllocAsync: not exported by the driver library (driver too old)"},
	{&LaunchError{Index: 3, Type: "int", Why: "no fixed C width; use int32 or int64"}, "cuda: launch argument 3 (int): no fixed C width; use int32 or int64"},
}

func TestErrorFormat(t *testing.T) {
	for _, tt := range errorTests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%#v.Error() =\n\t%q\nwant\n\t%q", tt.err, got, tt.want)
		}
	}
}

func TestUnsupportedError(t *testing.T) {
	err := fmt.Errorf("pipeline: %w", &UnsupportedError{Op: "cuMemPoolCreate"})
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, ErrNoDriver) {
		t.Errorf("UnsupportedError matches wrong sentinels")
	}
}

func TestDevicePtrString(t *testing.T) {
	for _, tt := range []struct {
		p    DevicePtr
		want string
	}{{0, "0x0"}, {0x7f3a40000000, "0x7f3a40000000"}, {DevicePtr(^uintptr(0)), "0xffffffffffffffff"}} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("DevicePtr(%#x).String() = %q, want %q", uintptr(tt.p), got, tt.want)
		}
	}
}

// TestNegativeSizes checks that sizes are validated before the driver is
// touched, so the errors are the same with or without a GPU.
func TestNegativeSizes(t *testing.T) {
	var s Stream
	var pool MemPool
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"MemAlloc", func() error { _, err := MemAlloc(-1); return err }()},
		{"MemAllocAsync", func() error { _, err := s.MemAllocAsync(-1); return err }()},
		{"MemAllocFromPoolAsync", func() error { _, err := s.MemAllocFromPoolAsync(pool, -1); return err }()},
		{"TrimTo", pool.TrimTo(-1)},
		{"CopyDtoD", CopyDtoD(0, 0, -1)},
		{"CopyDtoD", s.CopyDtoD(0, 0, -1)},
		{"MemsetD8", MemsetD8(0, 0, -1)},
		{"MemsetD8", s.MemsetD8(0, 0, -1)},
		{"MemsetD16", s.MemsetD16(0, 0, -1)},
		{"MemsetD32", s.MemsetD32(0, 0, -1)},
	} {
		if want := "cuda: " + tt.name + ": negative size -1"; tt.err == nil || tt.err.Error() != want {
			t.Errorf("%s(-1) = %v, want %q", tt.name, tt.err, want)
		}
	}
}
