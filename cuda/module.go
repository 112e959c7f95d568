package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"structs"
	"unsafe"
)

// Module is a CUmodule: loaded GPU code (PTX compiled by the driver's
// JIT, or a cubin/fatbin). It belongs to the context that was current when
// it was loaded.
type Module uintptr

// Function is a CUfunction: a kernel of a Module.
type Function uintptr

// jitOption is a CUjit_option.
type jitOption int32

const (
	jitInfoLogBuffer           jitOption = 3  // CU_JIT_INFO_LOG_BUFFER
	jitInfoLogBufferSizeBytes  jitOption = 4  // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	jitErrorLogBuffer          jitOption = 5  // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBufferSizeBytes jitOption = 6  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	jitLogVerbose              jitOption = 12 // CU_JIT_LOG_VERBOSE
)

// jitLogSize is the size of each JIT log buffer; longer logs are cut.
const jitLogSize = 8 << 10

// jitBuffers is what cuModuleLoadDataEx reads and writes during the call:
// the option arrays and the two logs, in one pinned object so that the
// pointers stored in vals point into pinned memory.
type jitBuffers struct {
	opts    [5]jitOption
	vals    [5]uintptr
	infoLog [jitLogSize]byte
	errLog  [jitLogSize]byte
}

// LoadModule loads a module image into the current context: PTX text (as
// the ptx package embeds it; a NUL terminator is added when missing), or
// a cubin or fatbin. It wraps cuModuleLoadDataEx with the JIT error and
// info logs captured: a rejected image gives an *Error whose Log holds
// them and which matches ErrInvalidPTX.
func LoadModule(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, errors.New("cuda: LoadModule of an empty image")
	}
	d, err := api()
	if err != nil {
		return 0, err
	}
	if image[len(image)-1] != 0 && !isELF(image) {
		// The driver reads PTX as a C string.
		image = append(image[:len(image):len(image)], 0)
	}
	b := new(jitBuffers)
	var pin runtime.Pinner
	pin.Pin(b)
	defer pin.Unpin()
	b.opts = [5]jitOption{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSizeBytes, jitLogVerbose}
	b.vals = [5]uintptr{uintptr(unsafe.Pointer(&b.infoLog[0])), jitLogSize, uintptr(unsafe.Pointer(&b.errLog[0])), jitLogSize, 1}
	var m Module
	r := d.cuModuleLoadDataEx(&m, unsafe.Pointer(&image[0]), uint32(len(b.opts)), &b.opts[0], &b.vals[0])
	if r != CUDA_SUCCESS {
		// On return the size options hold the bytes written.
		return 0, &Error{Op: "cuModuleLoadDataEx", Code: r, Log: jitLog(b.errLog[:], b.vals[3], b.infoLog[:], b.vals[1])}
	}
	return m, nil
}

func isELF(b []byte) bool { return bytes.HasPrefix(b, []byte("\x7fELF")) }

// jitLog joins the error and info logs, each cut to the length the driver
// reported.
func jitLog(errLog []byte, errN uintptr, infoLog []byte, infoN uintptr) string {
	text := func(b []byte, n uintptr) string {
		if n := int(uint32(n)); n < len(b) {
			b = b[:n]
		}
		return string(bytes.TrimSpace([]byte(cstring(b))))
	}
	e, i := text(errLog, errN), text(infoLog, infoN)
	switch {
	case e == "":
		return i
	case i == "":
		return e
	}
	return e + "\n" + i
}

// Unload unloads the module and zeroes *m; safe to repeat. Its functions
// become invalid. It wraps cuModuleUnload.
func (m *Module) Unload() error {
	if *m == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if err := check("cuModuleUnload", d.cuModuleUnload(*m)); err != nil {
		return err
	}
	*m = 0
	return nil
}

// Function returns the kernel with the given (unmangled, extern "C") name.
// It wraps cuModuleGetFunction; an unknown name's error matches
// CUDA_ERROR_NOT_FOUND and names it.
func (m Module) Function(name string) (Function, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var f Function
	if err := checkArg("cuModuleGetFunction", strconv.Quote(name), d.cuModuleGetFunction(&f, m, name)); err != nil {
		return 0, err
	}
	return f, nil
}

// Global returns the address and size of a __device__ or __constant__
// variable of the module. It wraps cuModuleGetGlobal_v2.
func (m Module) Global(name string) (DevicePtr, int, error) {
	d, err := api()
	if err != nil {
		return 0, 0, err
	}
	var p DevicePtr
	var n uintptr
	if err := checkArg("cuModuleGetGlobal_v2", strconv.Quote(name), d.cuModuleGetGlobal_v2(&p, &n, m, name)); err != nil {
		return 0, 0, err
	}
	return p, int(n), nil
}

// FunctionAttribute is a CUfunction_attribute, the argument of
// Function.Attribute.
type FunctionAttribute int32

// Function attributes (values from cuda.h).
const (
	FuncAttrMaxThreadsPerBlock FunctionAttribute = 0 // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: the most this kernel can launch with
	FuncAttrSharedSizeBytes    FunctionAttribute = 1 // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: static shared memory
	FuncAttrLocalSizeBytes     FunctionAttribute = 3 // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: local memory per thread
	FuncAttrNumRegs            FunctionAttribute = 4 // CU_FUNC_ATTRIBUTE_NUM_REGS: registers per thread
	FuncAttrPTXVersion         FunctionAttribute = 5 // CU_FUNC_ATTRIBUTE_PTX_VERSION: 10*major + minor of the PTX target
	FuncAttrBinaryVersion      FunctionAttribute = 6 // CU_FUNC_ATTRIBUTE_BINARY_VERSION: 10*major + minor of the SASS
)

// Attribute returns one attribute of the kernel. It wraps
// cuFuncGetAttribute.
func (f Function) Attribute(a FunctionAttribute) (int, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := checkArg("cuFuncGetAttribute", "attribute "+strconv.Itoa(int(a)), d.cuFuncGetAttribute(&v, a, f)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Dim3 is a grid or block shape. A zero Y or Z means 1, so Dim3{X: n} is a
// one-dimensional shape; X must not be zero.
type Dim3 struct {
	X, Y, Z uint32
}

func (d Dim3) norm() Dim3 {
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// LaunchError reports a kernel argument that Launch cannot pass.
type LaunchError struct {
	Index int    // position of the argument in args
	Type  string // its Go type
	Why   string
}

func (e *LaunchError) Error() string {
	return "cuda: launch argument " + strconv.Itoa(e.Index) + " (" + e.Type + "): " + e.Why
}

// hostLayoutType identifies the structs Launch accepts by pointer.
var hostLayoutType = reflect.TypeFor[structs.HostLayout]()

// Launch queues the kernel on s with the given grid and block shapes and
// sharedMem bytes of dynamic shared memory. It wraps cuLaunchKernel.
//
// args are the kernel's parameters in order, each of a type with a fixed C
// layout: DevicePtr, uintptr, int8..int64, uint8..uint64, float32,
// float64, or a pointer to a struct whose first field is
// structs.HostLayout and that holds no Go pointers (it is passed by value,
// as the kernel's struct parameter). int and uint are refused: their
// width does not say whether the kernel takes int or long long. The values
// are copied into one pinned block that the driver reads during the call
// and does not keep.
func (f Function) Launch(grid, block Dim3, sharedMem uint32, s Stream, args ...any) error {
	if grid.X == 0 || block.X == 0 {
		return fmt.Errorf("cuda: launch with grid %v and block %v: X must not be zero", grid, block)
	}
	d, err := api()
	if err != nil {
		return err
	}
	return d.launch(f, grid.norm(), block.norm(), sharedMem, s, args)
}

// launch marshals args and calls cuLaunchKernel.
func (d *driver) launch(f Function, grid, block Dim3, sharedMem uint32, s Stream, args []any) error {
	// One 8-byte slot per pointer, then each value in its own 8-byte
	// aligned slots.
	n := len(args)
	for i, a := range args {
		size, err := argSize(i, a)
		if err != nil {
			return err
		}
		n += int(size+7) / 8
	}
	var params unsafe.Pointer
	var pin runtime.Pinner
	if len(args) > 0 {
		buf := make([]uint64, n)
		pin.Pin(&buf[0])
		defer pin.Unpin()
		ptrs := buf[:len(args)]
		vals := buf[len(args):]
		for i, a := range args {
			ptrs[i] = uint64(uintptr(unsafe.Pointer(&vals[0])))
			vals = vals[putArg(vals, a):]
		}
		params = unsafe.Pointer(&buf[0])
	}
	return check("cuLaunchKernel", d.cuLaunchKernel(f, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, sharedMem, s, params, nil))
}

// argSize returns the C size of a launch argument, or why it cannot be
// passed.
func argSize(i int, a any) (uintptr, error) {
	switch a.(type) {
	case DevicePtr, uintptr, int64, uint64, float64:
		return 8, nil
	case int32, uint32, float32:
		return 4, nil
	case int16, uint16:
		return 2, nil
	case int8, uint8:
		return 1, nil
	case int, uint:
		return 0, &LaunchError{Index: i, Type: fmt.Sprintf("%T", a), Why: "no fixed C width; use int32 or int64"}
	}
	v := reflect.ValueOf(a)
	if v.Kind() != reflect.Pointer || v.Type().Elem().Kind() != reflect.Struct {
		return 0, &LaunchError{Index: i, Type: fmt.Sprintf("%T", a), Why: "unsupported type"}
	}
	t := v.Type().Elem()
	if v.IsNil() {
		return 0, &LaunchError{Index: i, Type: t.String(), Why: "nil pointer"}
	}
	if t.NumField() == 0 || t.Field(0).Type != hostLayoutType {
		return 0, &LaunchError{Index: i, Type: t.String(), Why: "struct parameters must begin with a structs.HostLayout field"}
	}
	if why := cLayoutProblem(t); why != "" {
		return 0, &LaunchError{Index: i, Type: t.String(), Why: why}
	}
	if t.Size() == 0 {
		return 0, &LaunchError{Index: i, Type: t.String(), Why: "empty struct"}
	}
	return t.Size(), nil
}

// cLayoutProblem returns why t cannot be copied to C as plain bytes, or "".
func cLayoutProblem(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return ""
	case reflect.Int, reflect.Uint:
		return "field of type " + t.String() + " has no fixed C width"
	case reflect.Array:
		return cLayoutProblem(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if why := cLayoutProblem(t.Field(i).Type); why != "" {
				return why
			}
		}
		return ""
	}
	return "field of type " + t.String() + " is not plain data"
}

// putArg stores a (already checked by argSize) at the start of vals and
// returns the number of slots used.
func putArg(vals []uint64, a any) int {
	switch v := a.(type) {
	case DevicePtr:
		vals[0] = uint64(v)
	case uintptr:
		vals[0] = uint64(v)
	case int64:
		vals[0] = uint64(v)
	case uint64:
		vals[0] = v
	case float64:
		vals[0] = math.Float64bits(v)
	case int32:
		vals[0] = uint64(uint32(v))
	case uint32:
		vals[0] = uint64(v)
	case float32:
		vals[0] = uint64(math.Float32bits(v))
	case int16:
		vals[0] = uint64(uint16(v))
	case uint16:
		vals[0] = uint64(v)
	case int8:
		vals[0] = uint64(uint8(v))
	case uint8:
		vals[0] = uint64(v)
	default:
		p := reflect.ValueOf(a).UnsafePointer()
		size := reflect.TypeOf(a).Elem().Size()
		dst := unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), len(vals)*8)
		copy(dst, unsafe.Slice((*byte)(p), size))
		return int(size+7) / 8
	}
	return 1
}
