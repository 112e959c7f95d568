package dlpack

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// Errors returned by Export and Synchronize. Returned errors wrap them with
// the field at fault, so callers test with errors.Is.
var (
	ErrInvalid  = errors.New("dlpack: invalid tensor description")
	ErrStream   = errors.New("dlpack: invalid stream")
	ErrNoMemory = errors.New("dlpack: out of C memory")
)

// MaxDims is the largest rank Export accepts. DLPack sets no limit; this
// one is far above any tensor the project makes, and keeps a corrupt
// shape from asking for a huge block.
const MaxDims = 32

// Format selects the managed struct an export is laid out as.
type Format int

const (
	// Versioned is DLManagedTensorVersioned (DLPack 1.x), for a capsule
	// named "dltensor_versioned". It is the zero Format: what consumers
	// that pass max_version >= (1, 0) to __dlpack__ take (tested with
	// PyTorch 2.11 and NumPy 2.4 and 2.5).
	Versioned Format = iota
	// Legacy is DLManagedTensor (DLPack 0.x), for a capsule named
	// "dltensor": what older consumers, and __dlpack__ calls without
	// max_version, expect.
	Legacy
)

// String returns "versioned" or "legacy".
func (f Format) String() string {
	switch f {
	case Versioned:
		return "versioned"
	case Legacy:
		return "legacy"
	}
	return "Format(" + fmt.Sprint(int(f)) + ")"
}

// CapsuleName returns the PyCapsule name for a managed tensor of this
// format: "dltensor_versioned" or "dltensor".
func (f Format) CapsuleName() string {
	if f == Legacy {
		return CapsuleName
	}
	return CapsuleNameVersioned
}

// Owner keeps the memory behind an exported tensor alive. Export calls
// Release exactly once, when the tensor's deleter runs.
//
// The deleter runs on whatever thread the consumer drops its last
// reference on (PyTorch: the Python thread that deletes the tensor), inside
// a call from C. Release must therefore return quickly, must not panic,
// and must not call the CUDA driver itself: no context is current on that
// thread. Hand the work to the goroutine that owns the device instead.
//
// For device memory, the consumer may still have kernels that read the
// tensor queued on its stream when the deleter runs (PyTorch does not
// synchronize before dropping external memory). Before reusing the memory,
// the owner records an event on the consumer's stream (the one given to
// Synchronize) and waits for it on its own stream.
type Owner interface {
	Release()
}

// ReleaseFunc adapts a function to the Owner interface.
type ReleaseFunc func()

// Release calls f.
func (f ReleaseFunc) Release() { f() }

// Desc describes a dense tensor to export: C-order (row-major) and
// contiguous, starting at Data. Export fills the strides.
type Desc struct {
	// Data is the address of element 0: a CUDA device pointer, a CUDA
	// page-locked host pointer, or C memory. Go memory qualifies only if
	// the Owner keeps it pinned (runtime.Pinner) until Release. Data may
	// be 0 only when the tensor has no elements, and must be aligned to
	// the element size.
	Data uintptr
	// Device is where Data lives: CPU, CUDA, CUDAHost or CUDAManaged.
	// The ID is the CUDA ordinal, and 0 for CPU.
	Device Device
	// DType is the element type, one lane wide: float16/32/64, bfloat16,
	// int and uint of 8 to 64 bits, bool (8 bits), complex64/128.
	DType DataType
	// Shape holds the extents, outermost first; at most MaxDims of them,
	// none negative. An empty Shape is a scalar.
	Shape []int64
}

// Managed is a managed tensor that Export wrote into C memory: one block
// holding the DLManagedTensorVersioned or DLManagedTensor followed by the
// shape and strides arrays. The block stays valid until its deleter runs,
// called by the consumer that took it (through the deleter pointer in the
// struct) or by Delete.
type Managed struct {
	ptr    uintptr
	id     uint64
	format Format
}

// Ptr returns the C address of the managed struct: the pointer to wrap in
// a PyCapsule named Format().CapsuleName(). It is only valid until the
// deleter runs.
func (m *Managed) Ptr() uintptr { return m.ptr }

// Format returns the layout of the managed struct.
func (m *Managed) Format() Format { return m.format }

// Delete runs the deleter unless it already ran: it frees the block and
// releases the owner. Use it for an export that no consumer took, for
// example when building the capsule failed or the consumer raised before
// taking ownership. Once a consumer has taken the tensor, only the
// consumer's deleter call may end it. Delete is safe to call more than
// once and from any goroutine.
func (m *Managed) Delete() {
	if m != nil {
		live.remove(m.ptr, m.id)
	}
}

// Export lays out the tensor d in C memory as a managed tensor of format f
// whose deleter frees that memory and then calls owner.Release, exactly
// once. The data itself is not copied.
//
// The result holds no Go pointers, so it may outlive any Go value. Export
// makes no stream promise: on a CUDA device, call Synchronize with the
// consumer's stream before handing the tensor over.
func Export(d Desc, f Format, owner Owner) (*Managed, error) {
	if owner == nil {
		return nil, fmt.Errorf("%w: nil owner", ErrInvalid)
	}
	if f != Versioned && f != Legacy {
		return nil, fmt.Errorf("%w: unknown format %d", ErrInvalid, int(f))
	}
	strides, err := d.check()
	if err != nil {
		return nil, err
	}
	c, err := loadC()
	if err != nil {
		return nil, err
	}
	ptr, id, err := c.newBlock(d, strides, f, owner)
	if err != nil {
		return nil, err
	}
	return &Managed{ptr: ptr, id: id, format: f}, nil
}

// check validates d and returns its C-order strides, in elements.
func (d *Desc) check() ([]int64, error) {
	switch d.Device.Type {
	case CPU:
		if d.Device.ID != 0 {
			return nil, fmt.Errorf("%w: device %s has id %d, want 0", ErrInvalid, d.Device.Type, d.Device.ID)
		}
	case CUDA, CUDAHost, CUDAManaged:
		if d.Device.ID < 0 {
			return nil, fmt.Errorf("%w: device id %d is negative", ErrInvalid, d.Device.ID)
		}
	default:
		return nil, fmt.Errorf("%w: device type %s is not exported", ErrInvalid, d.Device.Type)
	}
	size, ok := elemSize(d.DType)
	if !ok {
		return nil, fmt.Errorf("%w: dtype %s is not exported", ErrInvalid, d.DType)
	}
	if len(d.Shape) > MaxDims {
		return nil, fmt.Errorf("%w: shape has %d dimensions, at most %d allowed", ErrInvalid, len(d.Shape), MaxDims)
	}
	strides := make([]int64, len(d.Shape))
	n := int64(1)
	for i := len(d.Shape) - 1; i >= 0; i-- {
		e := d.Shape[i]
		if e < 0 {
			return nil, fmt.Errorf("%w: shape[%d] is %d", ErrInvalid, i, e)
		}
		strides[i] = n
		if e != 0 && n > math.MaxInt64/size/e {
			return nil, fmt.Errorf("%w: shape %v overflows int64 bytes", ErrInvalid, d.Shape)
		}
		n *= e
	}
	if d.Data == 0 && n != 0 {
		return nil, fmt.Errorf("%w: data is null for %d elements", ErrInvalid, n)
	}
	if d.Data%uintptr(size) != 0 {
		return nil, fmt.Errorf("%w: data %#x is not aligned to its %d-byte elements", ErrInvalid, d.Data, size)
	}
	return strides, nil
}

// elemSize returns the size in bytes of one element of t, and whether
// Export accepts t.
func elemSize(t DataType) (int64, bool) {
	if t.Lanes != 1 {
		return 0, false
	}
	var ok bool
	switch t.Code {
	case Int, UInt:
		ok = t.Bits == 8 || t.Bits == 16 || t.Bits == 32 || t.Bits == 64
	case Float:
		ok = t.Bits == 16 || t.Bits == 32 || t.Bits == 64
	case Bfloat:
		ok = t.Bits == 16
	case Bool:
		ok = t.Bits == 8
	case Complex:
		ok = t.Bits == 64 || t.Bits == 128
	}
	return int64(t.Bits) / 8, ok
}

// live holds every export whose deleter has not run yet, keyed by the C
// address of its block. It is process-wide because the deleter callbacks
// are: purego callback slots are finite and never freed, so each deleter
// is created once per process (see loadC) and finds its export here. An
// integer id, also stored in the block's manager_ctx, tells an export from
// a later one that malloc placed at the same address.
var live = registry{blocks: make(map[uintptr]entry)}

type registry struct {
	mu     sync.Mutex
	lastID uint64
	blocks map[uintptr]entry
}

// entry is what the deleter needs to end one export.
type entry struct {
	id    uint64
	owner Owner
	c     *clib
}

// add records a new block and returns its id.
func (r *registry) add(ptr uintptr, owner Owner, c *clib) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastID++
	r.blocks[ptr] = entry{id: r.lastID, owner: owner, c: c}
	return r.lastID
}

// remove ends the export at ptr if it is still live and has the given id:
// it unregisters it, frees the block and releases the owner.
func (r *registry) remove(ptr uintptr, id uint64) {
	r.mu.Lock()
	e, ok := r.blocks[ptr]
	ok = ok && e.id == id
	if ok {
		delete(r.blocks, ptr)
	}
	r.mu.Unlock()
	if ok {
		e.end(ptr)
	}
}

// removeCtx is remove for the deleter callbacks, which know only the
// block's address: the id comes from the manager_ctx word at ctxOff, read
// only while the block is known to be live. A block whose deleter already
// ran is left alone without being read.
func (r *registry) removeCtx(ptr, ctxOff uintptr) {
	r.mu.Lock()
	e, ok := r.blocks[ptr]
	ok = ok && readWord(ptr+ctxOff) == e.id
	if ok {
		delete(r.blocks, ptr)
	}
	r.mu.Unlock()
	if ok {
		e.end(ptr)
	}
}

// end frees the block at ptr, then releases the owner.
func (e entry) end(ptr uintptr) {
	e.c.free(ptr)
	e.owner.Release()
}
