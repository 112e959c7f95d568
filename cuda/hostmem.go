package cuda

import (
	"errors"
	"runtime"
	"strconv"
	"unsafe"
)

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
