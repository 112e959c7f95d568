package cuda

import (
	"errors"
	"runtime"
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

// CopyHtoD copies len(src) bytes from host memory to dst and returns when
// src may be reused. It wraps cuMemcpyHtoD_v2.
func CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyHtoD_v2", bytesArg(len(src)), d.cuMemcpyHtoD_v2(dst, unsafe.Pointer(&src[0]), uintptr(len(src))))
}

// CopyDtoH copies len(dst) bytes from src to host memory and returns when
// they have arrived. It wraps cuMemcpyDtoH_v2.
func CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoH_v2", bytesArg(len(dst)), d.cuMemcpyDtoH_v2(unsafe.Pointer(&dst[0]), src, uintptr(len(dst))))
}

// CopyDtoD copies n bytes between device buffers. It wraps
// cuMemcpyDtoD_v2, which is asynchronous to the host for most transfers.
func CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return negativeSize("CopyDtoD", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoD_v2", bytesArg(n), d.cuMemcpyDtoD_v2(dst, src, uintptr(n)))
}

// MemsetD8 sets n bytes at dst to v. It wraps cuMemsetD8_v2.
func MemsetD8(dst DevicePtr, v byte, n int) error {
	if n < 0 {
		return negativeSize("MemsetD8", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD8_v2", bytesArg(n), d.cuMemsetD8_v2(dst, v, uintptr(n)))
}

// CopyHtoD queues a copy of src to dst on the stream. The copy is
// asynchronous only from page-locked memory (HostBuffer.Bytes); src must
// then stay alive and unchanged until the stream has passed the copy.
// From pageable Go memory the driver stages the data before returning.
// It wraps cuMemcpyHtoDAsync_v2.
func (s Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyHtoDAsync_v2", bytesArg(len(src)), d.cuMemcpyHtoDAsync_v2(dst, unsafe.Pointer(&src[0]), uintptr(len(src)), s))
}

// HostCopy is one copy of a batch: Src (page-locked host memory) to Dst.
type HostCopy struct {
	Dst DevicePtr
	Src []byte
}

// memcpyAttributes is a CUmemcpyAttributes.
type memcpyAttributes struct {
	_              structs.HostLayout
	srcAccessOrder uint32 // CUmemcpySrcAccessOrder
	srcLocType     uint32 // CUmemLocation srcLocHint
	srcLocID       int32
	dstLocType     uint32 // CUmemLocation dstLocHint
	dstLocID       int32
	flags          uint32
}

// memcpySrcAccessOrderStream is CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: the
// sources are read in stream order.
const memcpySrcAccessOrderStream = 1

// CopyHtoDBatch queues copies, from page-locked host memory to the
// device, on the stream in one call where the driver has
// cuMemcpyBatchAsync (CUDA 12.8 and later; cuMemcpyBatchAsync_v2 from
// 13.0), else one cuMemcpyHtoDAsync_v2 each. The batch runs in stream
// order as a whole, the copies within it in no given order: their
// destinations must not overlap. The sources must stay page-locked and
// unchanged until the stream has passed the batch. Empty copies are
// skipped.
func (s Stream) CopyHtoDBatch(copies []HostCopy) error {
	d, err := api()
	if err != nil {
		return err
	}
	n := 0
	for _, c := range copies {
		if len(c.Src) > 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if n == 1 || (d.cuMemcpyBatchAsync_v2 == nil && d.cuMemcpyBatchAsync == nil) {
		for _, c := range copies {
			if err := s.CopyHtoD(c.Dst, c.Src); err != nil {
				return err
			}
		}
		return nil
	}
	dsts, srcs, sizes := make([]DevicePtr, 0, n), make([]DevicePtr, 0, n), make([]uintptr, 0, n)
	var total int
	for _, c := range copies {
		if len(c.Src) > 0 {
			dsts = append(dsts, c.Dst)
			srcs = append(srcs, DevicePtr(unsafe.Pointer(&c.Src[0])))
			sizes = append(sizes, uintptr(len(c.Src)))
			total += len(c.Src)
		}
	}
	attrs := memcpyAttributes{srcAccessOrder: memcpySrcAccessOrderStream}
	var idx uintptr
	if d.cuMemcpyBatchAsync_v2 != nil {
		return checkArg("cuMemcpyBatchAsync_v2", bytesArg(total), d.cuMemcpyBatchAsync_v2(&dsts[0], &srcs[0], &sizes[0], uintptr(n), &attrs, &idx, 1, s))
	}
	var fail uintptr
	return checkArg("cuMemcpyBatchAsync", bytesArg(total), d.cuMemcpyBatchAsync(&dsts[0], &srcs[0], &sizes[0], uintptr(n), &attrs, &idx, 1, &fail, s))
}

// CopyDtoH queues a copy of len(dst) bytes from src into dst on the
// stream. dst should be page-locked memory (HostBuffer.Bytes); it must
// stay alive, and its contents are valid only once the stream has passed
// the copy (Stream.Synchronize, or an Event recorded after it). It wraps
// cuMemcpyDtoHAsync_v2.
func (s Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoHAsync_v2", bytesArg(len(dst)), d.cuMemcpyDtoHAsync_v2(unsafe.Pointer(&dst[0]), src, uintptr(len(dst)), s))
}

// CopyDtoD queues a copy of n bytes between device buffers on the stream.
// It wraps cuMemcpyDtoDAsync_v2.
func (s Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return negativeSize("CopyDtoD", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemcpyDtoDAsync_v2", bytesArg(n), d.cuMemcpyDtoDAsync_v2(dst, src, uintptr(n), s))
}

// MemsetD8 queues setting n bytes at dst to v on the stream. It wraps
// cuMemsetD8Async.
func (s Stream) MemsetD8(dst DevicePtr, v byte, n int) error {
	if n < 0 {
		return negativeSize("MemsetD8", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD8Async", bytesArg(n), d.cuMemsetD8Async(dst, v, uintptr(n), s))
}

// MemsetD16 queues setting n 16-bit values at dst (2-byte aligned) to v
// on the stream. It wraps cuMemsetD16Async.
func (s Stream) MemsetD16(dst DevicePtr, v uint16, n int) error {
	if n < 0 {
		return negativeSize("MemsetD16", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD16Async", strconv.Itoa(n)+" values", d.cuMemsetD16Async(dst, v, uintptr(n), s))
}

// MemsetD32 queues setting n 32-bit values at dst (4-byte aligned) to v
// on the stream (a float32 fill is MemsetD32(dst, math.Float32bits(f),
// n)). It wraps cuMemsetD32Async.
func (s Stream) MemsetD32(dst DevicePtr, v uint32, n int) error {
	if n < 0 {
		return negativeSize("MemsetD32", n)
	}
	if n == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	return checkArg("cuMemsetD32Async", strconv.Itoa(n)+" values", d.cuMemsetD32Async(dst, v, uintptr(n), s))
}

// HostAllocFlags are the flags of HostAlloc (CU_MEMHOSTALLOC_*).
type HostAllocFlags uint32

// HostAlloc flags.
const (
	HostAllocPortable      HostAllocFlags = 1 // CU_MEMHOSTALLOC_PORTABLE: pinned for every context
	HostAllocDeviceMap     HostAllocFlags = 2 // CU_MEMHOSTALLOC_DEVICEMAP: mapped into the device's address space
	HostAllocWriteCombined HostAllocFlags = 4 // CU_MEMHOSTALLOC_WRITECOMBINED: fast H2D, very slow host reads
)

// HostRegisterFlags are the flags of HostRegister (CU_MEMHOSTREGISTER_*).
type HostRegisterFlags uint32

// HostRegister flags.
const (
	HostRegisterPortable  HostRegisterFlags = 1 // CU_MEMHOSTREGISTER_PORTABLE: pinned for every context
	HostRegisterDeviceMap HostRegisterFlags = 2 // CU_MEMHOSTREGISTER_DEVICEMAP: mapped into the device's address space
	HostRegisterIOMemory  HostRegisterFlags = 4 // CU_MEMHOSTREGISTER_IOMEMORY: the range is I/O memory
	HostRegisterReadOnly  HostRegisterFlags = 8 // CU_MEMHOSTREGISTER_READ_ONLY: the device only reads it
)

// HostBuffer is page-locked ("pinned") host memory: either allocated by
// the driver (HostAlloc) or a Go slice registered with it (HostRegister).
// Copies from and to it run at full bus speed and are truly asynchronous.
// Free it explicitly: nothing frees it behind the caller's back.
type HostBuffer struct {
	p          unsafe.Pointer
	n          int
	registered bool           // Go memory, registered; else cuMemHostAlloc'd
	pin        runtime.Pinner // holds registered Go memory in place
	mapping    []byte         // HostMap's anonymous mapping, unmapped after unregistering
}

// HostAlloc allocates n bytes of page-locked host memory. It wraps
// cuMemHostAlloc; it needs a current context.
func HostAlloc(n int, flags HostAllocFlags) (*HostBuffer, error) {
	if n <= 0 {
		return nil, errors.New("cuda: HostAlloc of " + strconv.Itoa(n) + " bytes")
	}
	d, err := api()
	if err != nil {
		return nil, err
	}
	var p unsafe.Pointer
	if err := checkArg("cuMemHostAlloc", bytesArg(n), d.cuMemHostAlloc(&p, uintptr(n), flags)); err != nil {
		return nil, err
	}
	return &HostBuffer{p: p, n: n}, nil
}

// HostRegister page-locks the Go memory of b in place and returns a
// HostBuffer over it; b is pinned (runtime.Pinner) until Free, which must
// be called before b is dropped. It wraps cuMemHostRegister_v2; it needs a
// current context.
func HostRegister(b []byte, flags HostRegisterFlags) (*HostBuffer, error) {
	if len(b) == 0 {
		return nil, errors.New("cuda: HostRegister of an empty slice")
	}
	d, err := api()
	if err != nil {
		return nil, err
	}
	h := &HostBuffer{p: unsafe.Pointer(&b[0]), n: len(b), registered: true}
	h.pin.Pin(h.p)
	if err := checkArg("cuMemHostRegister_v2", bytesArg(len(b)), d.cuMemHostRegister_v2(h.p, uintptr(len(b)), flags)); err != nil {
		h.pin.Unpin()
		return nil, err
	}
	return h, nil
}

// Bytes returns the buffer's memory as a slice (nil after Free). Its
// address is stable; slices of it keep the page-locked property.
func (h *HostBuffer) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Len returns the buffer's size in bytes (0 after Free).
func (h *HostBuffer) Len() int { return h.n }

// Pointer returns the buffer's address (nil after Free), for APIs that
// take host pointers.
func (h *HostBuffer) Pointer() unsafe.Pointer { return h.p }

// DevicePtr returns the device address through which kernels read and
// write the buffer directly over the bus (on 64-bit systems, the same
// number as the host address). The buffer must have been made with
// HostAllocDeviceMap or HostRegisterDeviceMap, or the device must support
// unified addressing. It wraps cuMemHostGetDevicePointer_v2.
func (h *HostBuffer) DevicePtr() (DevicePtr, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var p DevicePtr
	if err := check("cuMemHostGetDevicePointer_v2", d.cuMemHostGetDevicePointer_v2(&p, h.p, 0)); err != nil {
		return 0, err
	}
	return p, nil
}

// Free releases the buffer: cuMemFreeHost for HostAlloc memory,
// cuMemHostUnregister and unpinning for HostRegister memory (and
// unmapping for HostMap memory). Afterwards the
// buffer is empty; Free is safe to repeat. No copy may still be using it.
func (h *HostBuffer) Free() error {
	if h.p == nil {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if h.registered {
		if err := check("cuMemHostUnregister", d.cuMemHostUnregister(h.p)); err != nil {
			return err
		}
		h.pin.Unpin()
		if h.mapping != nil {
			if err := unmap(h.mapping); err != nil {
				return err
			}
			h.mapping = nil
		}
	} else if err := check("cuMemFreeHost", d.cuMemFreeHost(h.p)); err != nil {
		return err
	}
	h.p, h.n, h.registered = nil, 0, false
	return nil
}

// MemoryType is a CUmemorytype: where memory physically lives.
type MemoryType uint32

// Memory types.
const (
	MemoryTypeHost    MemoryType = 1 // CU_MEMORYTYPE_HOST: page-locked host memory
	MemoryTypeDevice  MemoryType = 2 // CU_MEMORYTYPE_DEVICE
	MemoryTypeArray   MemoryType = 3 // CU_MEMORYTYPE_ARRAY
	MemoryTypeUnified MemoryType = 4 // CU_MEMORYTYPE_UNIFIED
)

// pointerAttribute is a CUpointer_attribute.
type pointerAttribute int32

const (
	ptrAttrMemoryType     pointerAttribute = 2  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unsigned int
	ptrAttrIsManaged      pointerAttribute = 8  // CU_POINTER_ATTRIBUTE_IS_MANAGED, unsigned int (bool)
	ptrAttrDeviceOrdinal  pointerAttribute = 9  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, int
	ptrAttrRangeStartAddr pointerAttribute = 11 // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CUdeviceptr
	ptrAttrRangeSize      pointerAttribute = 12 // CU_POINTER_ATTRIBUTE_RANGE_SIZE, size_t
)

// PointerAttributes describes the memory an address belongs to.
type PointerAttributes struct {
	MemoryType MemoryType // device or page-locked host memory
	Device     int        // ordinal of the device the memory belongs to
	Start      DevicePtr  // start of the allocation that contains the address
	Size       int        // size of that allocation in bytes
	Managed    bool       // managed (unified) memory
}

// Attributes describes the allocation that contains p: device memory, or
// page-locked host memory seen through its address. Memory the driver does
// not know (ordinary Go memory) gives an error. It wraps
// cuPointerGetAttribute, once per field.
func (p DevicePtr) Attributes() (PointerAttributes, error) {
	d, err := api()
	if err != nil {
		return PointerAttributes{}, err
	}
	get := func(attr pointerAttribute) (uint64, error) {
		// Every attribute read here is at most 8 bytes; narrower ones land
		// in the low bytes of the zeroed value (little-endian).
		var v uint64
		err := checkArg("cuPointerGetAttribute", "attribute "+strconv.Itoa(int(attr))+" of "+p.String(), d.cuPointerGetAttribute(unsafe.Pointer(&v), attr, p))
		return v, err
	}
	var a PointerAttributes
	v, err := get(ptrAttrMemoryType)
	if err != nil {
		return PointerAttributes{}, err
	}
	a.MemoryType = MemoryType(v)
	if v, err = get(ptrAttrDeviceOrdinal); err != nil {
		return PointerAttributes{}, err
	}
	a.Device = int(int32(v))
	if v, err = get(ptrAttrRangeStartAddr); err != nil {
		return PointerAttributes{}, err
	}
	a.Start = DevicePtr(v)
	if v, err = get(ptrAttrRangeSize); err != nil {
		return PointerAttributes{}, err
	}
	a.Size = int(v)
	if v, err = get(ptrAttrIsManaged); err != nil {
		return PointerAttributes{}, err
	}
	a.Managed = uint32(v) != 0
	return a, nil
}
