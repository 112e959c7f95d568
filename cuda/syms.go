package cuda

import "unsafe"

// driver holds the raw entry points of libcuda.so.1, each field named
// exactly like the symbol it binds. The names are the versioned ABI names
// that cuda.h's #defines select for a build without per-thread default
// streams (cuMemAlloc -> cuMemAlloc_v2, cuMemsetD8Async -> cuMemsetD8Async,
// cuEventElapsedTime -> see below); a "_v2 if present" rule would be wrong
// (cuCtxSynchronize_v2 is a different API). C types map as: CUresult ->
// Result, CUdevice and int -> int32, unsigned int and enums -> uint32,
// size_t and CUdeviceptr and opaque handles -> uintptr, host pointers ->
// unsafe.Pointer.
//
// Every required name exists in CUDA 12.0 drivers and later. cuda.h 13.0
// maps cuEventElapsedTime to cuEventElapsedTime_v2 (same arguments; it does
// not report errors of unrelated pending work), which older drivers lack:
// both are bound, and EventElapsedTime calls _v2 where it exists.
type driver struct {
	// Initialisation and devices.
	cuInit                       func(flags uint32) Result
	cuDriverGetVersion           func(v *int32) Result
	cuDeviceGetCount             func(n *int32) Result
	cuDeviceGet                  func(dev *Device, ordinal int32) Result
	cuDeviceGetName              func(name *byte, n int32, dev Device) Result
	cuDeviceGetAttribute         func(v *int32, attr DeviceAttribute, dev Device) Result
	cuDeviceTotalMem_v2          func(bytes *uintptr, dev Device) Result
	cuDeviceGetPCIBusId          func(id *byte, n int32, dev Device) Result
	cuDeviceGetUuid_v2           func(uuid *UUID, dev Device) Result
	cuDevicePrimaryCtxRetain     func(ctx *Context, dev Device) Result
	cuDevicePrimaryCtxRelease_v2 func(dev Device) Result

	// Contexts.
	cuCtxSetCurrent             func(ctx Context) Result
	cuCtxGetCurrent             func(ctx *Context) Result
	cuCtxGetDevice              func(dev *Device) Result
	cuCtxSynchronize            func() Result
	cuCtxGetStreamPriorityRange func(least, greatest *int32) Result
	cuMemGetInfo_v2             func(free, total *uintptr) Result

	// Streams and events.
	cuStreamCreate             func(s *Stream, flags StreamFlags) Result
	cuStreamCreateWithPriority func(s *Stream, flags StreamFlags, priority int32) Result
	cuStreamDestroy_v2         func(s Stream) Result
	cuStreamQuery              func(s Stream) Result
	cuStreamSynchronize        func(s Stream) Result
	cuStreamWaitEvent          func(s Stream, e Event, flags uint32) Result
	cuEventCreate              func(e *Event, flags EventFlags) Result
	cuEventRecord              func(e Event, s Stream) Result
	cuEventQuery               func(e Event) Result
	cuEventSynchronize         func(e Event) Result
	cuEventElapsedTime         func(ms *float32, start, end Event) Result
	cuEventElapsedTime_v2      func(ms *float32, start, end Event) Result // optional
	cuEventDestroy_v2          func(e Event) Result

	// Device and pinned host memory, copies, memset.
	cuMemAlloc_v2                func(p *DevicePtr, bytes uintptr) Result
	cuMemFree_v2                 func(p DevicePtr) Result
	cuMemHostAlloc               func(p *unsafe.Pointer, bytes uintptr, flags HostAllocFlags) Result
	cuMemFreeHost                func(p unsafe.Pointer) Result
	cuMemHostRegister_v2         func(p unsafe.Pointer, bytes uintptr, flags HostRegisterFlags) Result
	cuMemHostUnregister          func(p unsafe.Pointer) Result
	cuMemHostGetDevicePointer_v2 func(d *DevicePtr, p unsafe.Pointer, flags uint32) Result
	cuMemcpyHtoD_v2              func(dst DevicePtr, src unsafe.Pointer, bytes uintptr) Result
	cuMemcpyDtoH_v2              func(dst unsafe.Pointer, src DevicePtr, bytes uintptr) Result
	cuMemcpyDtoD_v2              func(dst, src DevicePtr, bytes uintptr) Result
	cuMemcpyHtoDAsync_v2         func(dst DevicePtr, src unsafe.Pointer, bytes uintptr, s Stream) Result
	cuMemcpyDtoHAsync_v2         func(dst unsafe.Pointer, src DevicePtr, bytes uintptr, s Stream) Result
	cuMemcpyDtoDAsync_v2         func(dst, src DevicePtr, bytes uintptr, s Stream) Result
	cuMemcpyBatchAsync_v2        func(dsts, srcs *DevicePtr, sizes *uintptr, count uintptr, attrs *memcpyAttributes, attrsIdxs *uintptr, numAttrs uintptr, s Stream) Result                   // optional: CUDA 13.0
	cuMemcpyBatchAsync           func(dsts, srcs *DevicePtr, sizes *uintptr, count uintptr, attrs *memcpyAttributes, attrsIdxs *uintptr, numAttrs uintptr, failIdx *uintptr, s Stream) Result // optional: CUDA 12.8
	cuMemsetD8_v2                func(dst DevicePtr, v uint8, n uintptr) Result
	cuMemsetD8Async              func(dst DevicePtr, v uint8, n uintptr, s Stream) Result
	cuMemsetD16Async             func(dst DevicePtr, v uint16, n uintptr, s Stream) Result
	cuMemsetD32Async             func(dst DevicePtr, v uint32, n uintptr, s Stream) Result
	cuPointerGetAttribute        func(data unsafe.Pointer, attr pointerAttribute, p DevicePtr) Result

	// Modules and launches.
	cuModuleLoadDataEx   func(m *Module, image unsafe.Pointer, n uint32, opts *jitOption, vals *uintptr) Result
	cuModuleUnload       func(m Module) Result
	cuModuleGetFunction  func(f *Function, m Module, name string) Result
	cuModuleGetGlobal_v2 func(p *DevicePtr, bytes *uintptr, m Module, name string) Result
	cuFuncGetAttribute   func(v *int32, attr FunctionAttribute, f Function) Result
	cuLaunchKernel       func(f Function, gx, gy, gz, bx, by, bz, sharedMem uint32, s Stream, params, extra unsafe.Pointer) Result

	// IPC.
	cuIpcGetMemHandle     func(h *IPCMemHandle, p DevicePtr) Result
	cuIpcOpenMemHandle_v2 func(p *DevicePtr, h IPCMemHandle, flags IPCMemFlags) Result
	cuIpcCloseMemHandle   func(p DevicePtr) Result
	cuIpcGetEventHandle   func(h *IPCEventHandle, e Event) Result
	cuIpcOpenEventHandle  func(e *Event, h IPCEventHandle) Result

	// Stream-ordered allocator (optional: nil when the driver lacks it).
	cuMemAllocAsync           func(p *DevicePtr, bytes uintptr, s Stream) Result
	cuMemFreeAsync            func(p DevicePtr, s Stream) Result
	cuMemAllocFromPoolAsync   func(p *DevicePtr, bytes uintptr, pool MemPool, s Stream) Result
	cuDeviceGetDefaultMemPool func(pool *MemPool, dev Device) Result
	cuMemPoolCreate           func(pool *MemPool, props *memPoolProps) Result
	cuMemPoolDestroy          func(pool MemPool) Result
	cuMemPoolSetAttribute     func(pool MemPool, attr memPoolAttribute, v unsafe.Pointer) Result
	cuMemPoolGetAttribute     func(pool MemPool, attr memPoolAttribute, v unsafe.Pointer) Result
	cuMemPoolTrimTo           func(pool MemPool, keep uintptr) Result
}

// symbol is one row of the binding table: the exported name, the field
// that receives it, and whether a driver may lack it.
type symbol struct {
	name     string
	fn       any // pointer to a func field of driver
	optional bool
}

// symbols lists every entry point of d in one table.
func (d *driver) symbols() []symbol {
	return []symbol{
		{"cuInit", &d.cuInit, false},
		{"cuDriverGetVersion", &d.cuDriverGetVersion, false},
		{"cuDeviceGetCount", &d.cuDeviceGetCount, false},
		{"cuDeviceGet", &d.cuDeviceGet, false},
		{"cuDeviceGetName", &d.cuDeviceGetName, false},
		{"cuDeviceGetAttribute", &d.cuDeviceGetAttribute, false},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem_v2, false},
		{"cuDeviceGetPCIBusId", &d.cuDeviceGetPCIBusId, false},
		{"cuDeviceGetUuid_v2", &d.cuDeviceGetUuid_v2, false},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, false},
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease_v2, false},

		{"cuCtxSetCurrent", &d.cuCtxSetCurrent, false},
		{"cuCtxGetCurrent", &d.cuCtxGetCurrent, false},
		{"cuCtxGetDevice", &d.cuCtxGetDevice, false},
		{"cuCtxSynchronize", &d.cuCtxSynchronize, false},
		{"cuCtxGetStreamPriorityRange", &d.cuCtxGetStreamPriorityRange, false},
		{"cuMemGetInfo_v2", &d.cuMemGetInfo_v2, false},

		{"cuStreamCreate", &d.cuStreamCreate, false},
		{"cuStreamCreateWithPriority", &d.cuStreamCreateWithPriority, false},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy_v2, false},
		{"cuStreamQuery", &d.cuStreamQuery, false},
		{"cuStreamSynchronize", &d.cuStreamSynchronize, false},
		{"cuStreamWaitEvent", &d.cuStreamWaitEvent, false},
		{"cuEventCreate", &d.cuEventCreate, false},
		{"cuEventRecord", &d.cuEventRecord, false},
		{"cuEventQuery", &d.cuEventQuery, false},
		{"cuEventSynchronize", &d.cuEventSynchronize, false},
		{"cuEventElapsedTime", &d.cuEventElapsedTime, false},
		{"cuEventElapsedTime_v2", &d.cuEventElapsedTime_v2, true},
		{"cuEventDestroy_v2", &d.cuEventDestroy_v2, false},

		{"cuMemAlloc_v2", &d.cuMemAlloc_v2, false},
		{"cuMemFree_v2", &d.cuMemFree_v2, false},
		{"cuMemHostAlloc", &d.cuMemHostAlloc, false},
		{"cuMemFreeHost", &d.cuMemFreeHost, false},
		{"cuMemHostRegister_v2", &d.cuMemHostRegister_v2, false},
		{"cuMemHostUnregister", &d.cuMemHostUnregister, false},
		{"cuMemHostGetDevicePointer_v2", &d.cuMemHostGetDevicePointer_v2, false},
		{"cuMemcpyHtoD_v2", &d.cuMemcpyHtoD_v2, false},
		{"cuMemcpyDtoH_v2", &d.cuMemcpyDtoH_v2, false},
		{"cuMemcpyDtoD_v2", &d.cuMemcpyDtoD_v2, false},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync_v2, false},
		{"cuMemcpyBatchAsync_v2", &d.cuMemcpyBatchAsync_v2, true},
		{"cuMemcpyBatchAsync", &d.cuMemcpyBatchAsync, true},
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync_v2, false},
		{"cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync_v2, false},
		{"cuMemsetD8_v2", &d.cuMemsetD8_v2, false},
		{"cuMemsetD8Async", &d.cuMemsetD8Async, false},
		{"cuMemsetD16Async", &d.cuMemsetD16Async, false},
		{"cuMemsetD32Async", &d.cuMemsetD32Async, false},
		{"cuPointerGetAttribute", &d.cuPointerGetAttribute, false},

		{"cuModuleLoadDataEx", &d.cuModuleLoadDataEx, false},
		{"cuModuleUnload", &d.cuModuleUnload, false},
		{"cuModuleGetFunction", &d.cuModuleGetFunction, false},
		{"cuModuleGetGlobal_v2", &d.cuModuleGetGlobal_v2, false},
		{"cuFuncGetAttribute", &d.cuFuncGetAttribute, false},
		{"cuLaunchKernel", &d.cuLaunchKernel, false},

		{"cuIpcGetMemHandle", &d.cuIpcGetMemHandle, false},
		{"cuIpcOpenMemHandle_v2", &d.cuIpcOpenMemHandle_v2, false},
		{"cuIpcCloseMemHandle", &d.cuIpcCloseMemHandle, false},
		{"cuIpcGetEventHandle", &d.cuIpcGetEventHandle, false},
		{"cuIpcOpenEventHandle", &d.cuIpcOpenEventHandle, false},

		{"cuMemAllocAsync", &d.cuMemAllocAsync, true},
		{"cuMemFreeAsync", &d.cuMemFreeAsync, true},
		{"cuMemAllocFromPoolAsync", &d.cuMemAllocFromPoolAsync, true},
		{"cuDeviceGetDefaultMemPool", &d.cuDeviceGetDefaultMemPool, true},
		{"cuMemPoolCreate", &d.cuMemPoolCreate, true},
		{"cuMemPoolDestroy", &d.cuMemPoolDestroy, true},
		{"cuMemPoolSetAttribute", &d.cuMemPoolSetAttribute, true},
		{"cuMemPoolGetAttribute", &d.cuMemPoolGetAttribute, true},
		{"cuMemPoolTrimTo", &d.cuMemPoolTrimTo, true},
	}
}
