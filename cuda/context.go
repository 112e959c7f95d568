package cuda

import "runtime"

// Context is a CUcontext. The package uses each device's primary context
// (the one the CUDA runtime, PyTorch and nvCOMP use), so device pointers
// pass freely between them within a process.
//
// A context is current per OS thread: driver calls that allocate, copy,
// create streams or load modules act on the calling thread's current
// context. Run them on an Executor, or under LockThread.
type Context uintptr

// RetainPrimaryContext retains the device's primary context, creating it on
// first use, and returns it. Each retain needs one
// ReleasePrimaryContext. It wraps cuDevicePrimaryCtxRetain.
func (dev Device) RetainPrimaryContext() (Context, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var c Context
	if err := check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c, dev)); err != nil {
		return 0, err
	}
	return c, nil
}

// ReleasePrimaryContext drops one reference taken by
// RetainPrimaryContext; the last one destroys the context and everything
// allocated in it. It wraps cuDevicePrimaryCtxRelease_v2.
func (dev Device) ReleasePrimaryContext() error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease_v2(dev))
}

// SetCurrent makes c the calling OS thread's current context (0 unsets
// it). The goroutine should be locked to its thread (runtime.LockOSThread)
// for this to mean anything; LockThread does both. It wraps
// cuCtxSetCurrent.
func (c Context) SetCurrent() error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuCtxSetCurrent", d.cuCtxSetCurrent(c))
}

// CurrentContext returns the calling OS thread's current context, 0 if
// none. It wraps cuCtxGetCurrent.
func CurrentContext() (Context, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var c Context
	if err := check("cuCtxGetCurrent", d.cuCtxGetCurrent(&c)); err != nil {
		return 0, err
	}
	return c, nil
}

// CurrentDevice returns the device of the calling thread's current
// context. It wraps cuCtxGetDevice.
func CurrentDevice() (Device, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var dev Device
	if err := check("cuCtxGetDevice", d.cuCtxGetDevice(&dev)); err != nil {
		return 0, err
	}
	return dev, nil
}

// Synchronize blocks until all work in the current context has finished.
// It wraps cuCtxSynchronize (not cuCtxSynchronize_v2, a different API).
func Synchronize() error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuCtxSynchronize", d.cuCtxSynchronize())
}

// StreamPriorityRange returns the current context's stream priorities:
// least is the lowest priority (0), greatest the highest (a negative
// number). It wraps cuCtxGetStreamPriorityRange.
func StreamPriorityRange() (least, greatest int, err error) {
	d, err := api()
	if err != nil {
		return 0, 0, err
	}
	var l, g int32
	if err := check("cuCtxGetStreamPriorityRange", d.cuCtxGetStreamPriorityRange(&l, &g)); err != nil {
		return 0, 0, err
	}
	return int(l), int(g), nil
}

// MemGetInfo returns the free and total memory of the current context's
// device, in bytes. It wraps cuMemGetInfo_v2.
func MemGetInfo() (free, total int, err error) {
	d, err := api()
	if err != nil {
		return 0, 0, err
	}
	var f, t uintptr
	if err := check("cuMemGetInfo_v2", d.cuMemGetInfo_v2(&f, &t)); err != nil {
		return 0, 0, err
	}
	return int(f), int(t), nil
}

// LockThread is for goroutines that call the driver themselves instead of
// going through an Executor (IO or decode workers that issue their own
// copies, say). It locks the goroutine to its OS thread and makes c
// current there. The returned unlock restores the thread's previous
// context and unlocks the thread; call it exactly once, from the same
// goroutine:
//
//	unlock, err := cuda.LockThread(ctx)
//	if err != nil {
//		return err
//	}
//	defer unlock()
//
// On error the thread is already unlocked and unlock is nil.
func LockThread(c Context) (unlock func(), err error) {
	d, err := api()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	var prev Context
	if err := check("cuCtxGetCurrent", d.cuCtxGetCurrent(&prev)); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	if err := check("cuCtxSetCurrent", d.cuCtxSetCurrent(c)); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() {
		// Restoring can only fail for a context destroyed meanwhile; the
		// thread is then left with no valid context either way.
		d.cuCtxSetCurrent(prev)
		runtime.UnlockOSThread()
	}, nil
}
