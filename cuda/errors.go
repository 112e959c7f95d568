package cuda

import (
	"errors"
	"sort"
	"strconv"
)

//go:generate go run mkresult.go -header /usr/local/cuda/include/cuda.h -o zresult.go

// Result is a CUresult, the status code every driver call returns.
// It implements error; the constants (CUDA_SUCCESS, CUDA_ERROR_*) and their
// names and descriptions come from cuda.h and the driver (zresult.go).
//
// Result.Is maps codes onto the package's sentinels, so callers test
// errors.Is(err, ErrOutOfMemory) rather than switching on numbers.
type Result int32

// resultEntry is one row of the generated table in zresult.go.
type resultEntry struct {
	code Result
	name string // CUDA_ERROR_OUT_OF_MEMORY
	desc string // out of memory (what cuGetErrorString returns)
}

func (r Result) entry() (resultEntry, bool) {
	i := sort.Search(len(resultTable), func(i int) bool { return resultTable[i].code >= r })
	if i < len(resultTable) && resultTable[i].code == r {
		return resultTable[i], true
	}
	return resultEntry{}, false
}

// String returns the C name of the code, such as "CUDA_ERROR_OUT_OF_MEMORY",
// or "CUresult(N)" for a code cuda.h does not name.
func (r Result) String() string {
	if e, ok := r.entry(); ok {
		return e.name
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// Description returns the driver's short description of the code, such as
// "out of memory", or "" for a code cuda.h does not name.
func (r Result) Description() string {
	e, _ := r.entry()
	return e.desc
}

// Error returns the name and the description, such as
// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
func (r Result) Error() string {
	if e, ok := r.entry(); ok {
		return e.name + " (" + e.desc + ")"
	}
	return r.String()
}

// Is reports whether the code belongs to the class of target, one of the
// sentinels ErrNoDriver, ErrNoDevice, ErrOutOfMemory, ErrNotReady,
// ErrInvalidContext, ErrUnsupported (which errors.ErrUnsupported also
// matches) or ErrInvalidPTX.
func (r Result) Is(target error) bool {
	switch target {
	case ErrNoDriver:
		return r == CUDA_ERROR_STUB_LIBRARY ||
			r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH || r == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
	case ErrNoDevice:
		return r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_INVALID_DEVICE || r == CUDA_ERROR_DEVICE_UNAVAILABLE
	case ErrOutOfMemory:
		return r == CUDA_ERROR_OUT_OF_MEMORY
	case ErrNotReady:
		return r == CUDA_ERROR_NOT_READY
	case ErrInvalidContext:
		return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_INITIALIZED ||
			r == CUDA_ERROR_DEINITIALIZED || r == CUDA_ERROR_CONTEXT_IS_DESTROYED
	case ErrUnsupported, errors.ErrUnsupported:
		return r == CUDA_ERROR_NOT_SUPPORTED
	case ErrInvalidPTX:
		return r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
			r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE ||
			r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND || r == CUDA_ERROR_JIT_COMPILATION_DISABLED
	}
	return false
}

// Sentinels for errors.Is. A *Error matches one when its Result belongs to
// the class (see Result.Is); loading failures match ErrNoDriver.
var (
	// ErrNoDriver: libcuda.so.1 is missing, lacks a required symbol, is a
	// stub, or is older than the CUDA runtime it was asked to serve.
	ErrNoDriver = errors.New("cuda: no usable driver library")
	// ErrNoDevice: no CUDA device, or no device with that ordinal.
	ErrNoDevice = errors.New("cuda: no such device")
	// ErrOutOfMemory: an allocation (device or pinned host) failed for lack
	// of memory.
	ErrOutOfMemory = errors.New("cuda: out of memory")
	// ErrNotReady: the work is still running. Stream.Query and Event.Query
	// report that as done == false, never as this error; EventElapsedTime
	// returns it when an event has not completed.
	ErrNotReady = errors.New("cuda: not ready")
	// ErrInvalidContext: no context, or a destroyed one, is current on the
	// calling OS thread. Run the call on an Executor or under LockThread.
	ErrInvalidContext = errors.New("cuda: no valid context current on this thread")
	// ErrUnsupported: the driver or the device lacks the feature, either
	// by code (CUDA_ERROR_NOT_SUPPORTED) or because the driver library does
	// not export the entry point (*UnsupportedError).
	ErrUnsupported = errors.New("cuda: not supported")
	// ErrInvalidPTX: a module image was rejected (bad PTX, a PTX ISA newer
	// than the driver, no code for this GPU, JIT unavailable).
	ErrInvalidPTX = errors.New("cuda: module image rejected")
	// ErrClosed: the Executor was closed.
	ErrClosed = errors.New("cuda: executor closed")
)

// Error is a failed driver call: the entry point's symbol name, what the
// call was about, and its CUresult. Module loads also carry the JIT log.
type Error struct {
	Op   string // the driver symbol, e.g. "cuMemAlloc_v2"
	Arg  string // what the call was about, e.g. `"vecadd"` or "1048576 bytes"; may be empty
	Code Result // what the driver returned
	Log  string // JIT error and info log (module loads only), else ""
}

// Error formats as "cuda: cuMemAlloc_v2 1048576 bytes:
// CUDA_ERROR_OUT_OF_MEMORY (out of memory)", followed by the JIT log when
// there is one.
func (e *Error) Error() string {
	s := "cuda: " + e.Op
	if e.Arg != "" {
		s += " " + e.Arg
	}
	s += ": " + e.Code.Error()
	if e.Log != "" {
		s += ": " + e.Log
	}
	return s
}

// Unwrap returns the Result, so errors.Is(err, CUDA_ERROR_OUT_OF_MEMORY)
// and errors.Is(err, ErrOutOfMemory) both hold.
func (e *Error) Unwrap() error { return e.Code }

// UnsupportedError reports an optional entry point that the loaded driver
// library does not export (an old driver). It matches ErrUnsupported and
// errors.ErrUnsupported.
type UnsupportedError struct {
	Op string // the missing symbol, e.g. "cuMemAllocAsync"
}

func (e *UnsupportedError) Error() string {
	return "cuda: " + e.Op + ": not exported by the driver library (driver too old)"
}

// Is reports whether target is ErrUnsupported or errors.ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool {
	return target == ErrUnsupported || target == errors.ErrUnsupported
}

// check turns a driver return code into nil or an *Error naming op.
func check(op string, r Result) error {
	if r == CUDA_SUCCESS {
		return nil
	}
	return &Error{Op: op, Code: r}
}

// checkArg is check with what the call was about.
func checkArg(op, arg string, r Result) error {
	if r == CUDA_SUCCESS {
		return nil
	}
	return &Error{Op: op, Arg: arg, Code: r}
}

// bytesArg formats a byte count for Error.Arg.
func bytesArg(n int) string { return strconv.Itoa(n) + " bytes" }
