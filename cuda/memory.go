package cuda

import (
	"errors"
	"strconv"
	"structs"
	"unsafe"
)

// DevicePtr is a CUdeviceptr: an address in the unified virtual address
// space, usually of device memory. Offsets are plain arithmetic
// (base + DevicePtr(off)).
type DevicePtr uintptr

// String formats the address in hex, like "0x7f3a40000000".
func (p DevicePtr) String() string { return "0x" + strconv.FormatUint(uint64(p), 16) }

// negativeSize reports a negative byte or element count passed to op.
func negativeSize(op string, n int) error {
	return errors.New("cuda: " + op + ": negative size " + strconv.Itoa(n))
}

// MemAlloc allocates n bytes of device memory in the current context. It
// wraps cuMemAlloc_v2; failure for lack of memory matches ErrOutOfMemory.
func MemAlloc(n int) (DevicePtr, error) {
	if n < 0 {
		return 0, negativeSize("MemAlloc", n)
	}
	d, err := api()
	if err != nil {
		return 0, err
	}
	var p DevicePtr
	if err := checkArg("cuMemAlloc_v2", bytesArg(n), d.cuMemAlloc_v2(&p, uintptr(n))); err != nil {
		return 0, err
	}
	return p, nil
}

// Free frees memory from MemAlloc and zeroes *p; freeing a zero DevicePtr
// does nothing, so Free is safe to repeat. No queued work may still use
// the memory. It wraps cuMemFree_v2; free stream-ordered memory with
// FreeAsync instead.
func (p *DevicePtr) Free() error {
	if *p == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if err := check("cuMemFree_v2", d.cuMemFree_v2(*p)); err != nil {
		return err
	}
	*p = 0
	return nil
}

// MemAllocAsync allocates n bytes, usable by work queued on s after this
// call, from the device's current memory pool (the default pool unless
// changed). It wraps cuMemAllocAsync; drivers without the stream-ordered
// allocator give an *UnsupportedError.
func (s Stream) MemAllocAsync(n int) (DevicePtr, error) {
	if n < 0 {
		return 0, negativeSize("MemAllocAsync", n)
	}
	d, err := api()
	if err != nil {
		return 0, err
	}
	if d.cuMemAllocAsync == nil {
		return 0, &UnsupportedError{Op: "cuMemAllocAsync"}
	}
	var p DevicePtr
	if err := checkArg("cuMemAllocAsync", bytesArg(n), d.cuMemAllocAsync(&p, uintptr(n), s)); err != nil {
		return 0, err
	}
	return p, nil
}

// MemAllocFromPoolAsync is MemAllocAsync from a given pool. It wraps
// cuMemAllocFromPoolAsync.
func (s Stream) MemAllocFromPoolAsync(pool MemPool, n int) (DevicePtr, error) {
	if n < 0 {
		return 0, negativeSize("MemAllocFromPoolAsync", n)
	}
	d, err := api()
	if err != nil {
		return 0, err
	}
	if d.cuMemAllocFromPoolAsync == nil {
		return 0, &UnsupportedError{Op: "cuMemAllocFromPoolAsync"}
	}
	var p DevicePtr
	if err := checkArg("cuMemAllocFromPoolAsync", bytesArg(n), d.cuMemAllocFromPoolAsync(&p, uintptr(n), pool, s)); err != nil {
		return 0, err
	}
	return p, nil
}

// FreeAsync returns stream-ordered memory to its pool once the work queued
// on s before this call has finished, and zeroes *p; freeing a zero
// DevicePtr does nothing. It wraps cuMemFreeAsync.
func (p *DevicePtr) FreeAsync(s Stream) error {
	if *p == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if d.cuMemFreeAsync == nil {
		return &UnsupportedError{Op: "cuMemFreeAsync"}
	}
	if err := check("cuMemFreeAsync", d.cuMemFreeAsync(*p, s)); err != nil {
		return err
	}
	*p = 0
	return nil
}

// MemPool is a CUmemoryPool, the backing store of the stream-ordered
// allocator.
type MemPool uintptr

// memPoolAttribute is a CUmemPool_attribute.
type memPoolAttribute int32

const (
	memPoolAttrReleaseThreshold   memPoolAttribute = 4 // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, cuuint64_t
	memPoolAttrReservedMemCurrent memPoolAttribute = 5 // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, cuuint64_t
	memPoolAttrUsedMemCurrent     memPoolAttribute = 7 // CU_MEMPOOL_ATTR_USED_MEM_CURRENT, cuuint64_t
)

// memPoolProps mirrors CUmemPoolProps in cuda.h (CUDA 12.2 and later; 88
// bytes in every version, the tail being reserved).
type memPoolProps struct {
	_                       structs.HostLayout
	allocType               int32 // CUmemAllocationType; CU_MEM_ALLOCATION_TYPE_PINNED = 1
	handleTypes             int32 // CUmemAllocationHandleType; CU_MEM_HANDLE_TYPE_NONE = 0
	locType                 int32 // CUmemLocation.type; CU_MEM_LOCATION_TYPE_DEVICE = 1
	locID                   int32 // CUmemLocation.id: the device ordinal
	win32SecurityAttributes uintptr
	maxSize                 uintptr // 0: the device's memory size
	usage                   uint16
	_                       [54]byte // reserved, must be zero
}

// DefaultMemPool returns the device's default memory pool. It wraps
// cuDeviceGetDefaultMemPool.
func (dev Device) DefaultMemPool() (MemPool, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	if d.cuDeviceGetDefaultMemPool == nil {
		return 0, &UnsupportedError{Op: "cuDeviceGetDefaultMemPool"}
	}
	var pool MemPool
	if err := check("cuDeviceGetDefaultMemPool", d.cuDeviceGetDefaultMemPool(&pool, dev)); err != nil {
		return 0, err
	}
	return pool, nil
}

// NewMemPool creates a memory pool of device memory on dev, not exportable
// to other processes. It wraps cuMemPoolCreate.
func NewMemPool(dev Device) (MemPool, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	if d.cuMemPoolCreate == nil {
		return 0, &UnsupportedError{Op: "cuMemPoolCreate"}
	}
	props := memPoolProps{allocType: 1, locType: 1, locID: int32(dev)}
	var pool MemPool
	if err := check("cuMemPoolCreate", d.cuMemPoolCreate(&pool, &props)); err != nil {
		return 0, err
	}
	return pool, nil
}

// Destroy destroys a pool made by NewMemPool and zeroes *p; safe to
// repeat. Memory still allocated from it is freed when it is freed. The
// default pool cannot be destroyed. It wraps cuMemPoolDestroy.
func (p *MemPool) Destroy() error {
	if *p == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if d.cuMemPoolDestroy == nil {
		return &UnsupportedError{Op: "cuMemPoolDestroy"}
	}
	if err := check("cuMemPoolDestroy", d.cuMemPoolDestroy(*p)); err != nil {
		return err
	}
	*p = 0
	return nil
}

func (p MemPool) getAttribute(attr memPoolAttribute) (uint64, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	if d.cuMemPoolGetAttribute == nil {
		return 0, &UnsupportedError{Op: "cuMemPoolGetAttribute"}
	}
	var v uint64
	if err := checkArg("cuMemPoolGetAttribute", "attribute "+strconv.Itoa(int(attr)), d.cuMemPoolGetAttribute(p, attr, unsafe.Pointer(&v))); err != nil {
		return 0, err
	}
	return v, nil
}

// SetReleaseThreshold sets how much unused memory the pool keeps reserved
// across synchronisations instead of returning it to the system
// (math.MaxUint64: keep everything; the default is 0). It wraps
// cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
func (p MemPool) SetReleaseThreshold(bytes uint64) error {
	d, err := api()
	if err != nil {
		return err
	}
	if d.cuMemPoolSetAttribute == nil {
		return &UnsupportedError{Op: "cuMemPoolSetAttribute"}
	}
	return checkArg("cuMemPoolSetAttribute", "release threshold", d.cuMemPoolSetAttribute(p, memPoolAttrReleaseThreshold, unsafe.Pointer(&bytes)))
}

// ReleaseThreshold returns the pool's release threshold in bytes. It wraps
// cuMemPoolGetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
func (p MemPool) ReleaseThreshold() (uint64, error) {
	return p.getAttribute(memPoolAttrReleaseThreshold)
}

// Usage returns the bytes the pool has reserved from the device and the
// bytes of it handed out to allocations now. It wraps
// cuMemPoolGetAttribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT and
// CU_MEMPOOL_ATTR_USED_MEM_CURRENT).
func (p MemPool) Usage() (reserved, used uint64, err error) {
	if reserved, err = p.getAttribute(memPoolAttrReservedMemCurrent); err != nil {
		return 0, 0, err
	}
	if used, err = p.getAttribute(memPoolAttrUsedMemCurrent); err != nil {
		return 0, 0, err
	}
	return reserved, used, nil
}

// TrimTo releases reserved but unused memory until at most keep bytes of
// it remain. It wraps cuMemPoolTrimTo.
func (p MemPool) TrimTo(keep int) error {
	if keep < 0 {
		return negativeSize("TrimTo", keep)
	}
	d, err := api()
	if err != nil {
		return err
	}
	if d.cuMemPoolTrimTo == nil {
		return &UnsupportedError{Op: "cuMemPoolTrimTo"}
	}
	return check("cuMemPoolTrimTo", d.cuMemPoolTrimTo(p, uintptr(keep)))
}
