// Package cuda is a cgo-free binding of the CUDA driver API (libcuda.so.1),
// loaded at run time through purego.
//
// The library is opened once, on first use (Init, or any other call): the
// soname libcuda.so.1, or the path in $DAMACY_LIBCUDA. Entry points are
// bound by the versioned names cuda.h selects (cuMemAlloc_v2, ...). A
// missing library or symbol is a *LoadError matching ErrNoDriver.
//
// Handles are typed integers: Device, Context, Stream, Event, DevicePtr,
// MemPool, Module, Function; HostBuffer is page-locked host memory. Each
// method's doc names the C call it wraps. Destroy, Free, Unload and Close
// zero their handle and are safe to repeat; nothing is freed by a
// finalizer.
//
// # Threads
//
// A CUDA context is current per OS thread, and most calls (allocation,
// stream and event creation, module loads, copies) act on the calling
// thread's current context. Run them through an Executor, which owns a
// locked OS thread with the device's primary context current:
//
//	e, err := cuda.NewExecutor(dev)
//	...
//	defer e.Close()
//	err = e.Do(func() error {
//		p, err := cuda.MemAlloc(n)
//		...
//	})
//
// or, in a goroutine that must call the driver itself, LockThread. Handles
// are process-wide: a Stream created on the executor may be used anywhere
// the context is current.
//
// # Errors
//
// Every failed call returns an *Error naming the driver symbol and its
// Result (a CUresult), such as "cuda: cuMemAlloc_v2 1048576 bytes:
// CUDA_ERROR_OUT_OF_MEMORY (out of memory)". Test them with errors.Is
// against the sentinels (ErrOutOfMemory, ErrNoDevice, ...) or a Result
// constant. Query methods report work in progress as done == false, never
// as an error.
//
// Imports: the standard library and purego.
package cuda
