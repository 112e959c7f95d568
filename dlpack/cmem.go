package dlpack

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// This file holds everything that touches C memory: libc's allocator, the
// deleter callbacks, and the writes that lay a managed tensor out.

// libcName is glibc's soname on Linux; the driver needs glibc anyway.
const libcName = "libc.so.6"

// clib is what exports need from C: libc's malloc and free and the C
// function pointers of the two deleters.
type clib struct {
	mallocFn, freeFn uintptr
	deleter          uintptr // deleteLegacy: void (*)(DLManagedTensor*)
	deleterVersioned uintptr // deleteVersioned: void (*)(DLManagedTensorVersioned*)
}

// loadC binds libc and creates the deleter callbacks, once per process:
// purego has a fixed table of callback slots that are never freed, so
// each deleter signature gets exactly one.
var loadC = sync.OnceValues(func() (*clib, error) {
	h, err := purego.Dlopen(libcName, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("dlpack: load %s: %w", libcName, err)
	}
	c := &clib{}
	for _, s := range []struct {
		name string
		fn   *uintptr
	}{{"malloc", &c.mallocFn}, {"free", &c.freeFn}} {
		if *s.fn, err = purego.Dlsym(h, s.name); err != nil {
			return nil, fmt.Errorf("dlpack: %s in %s: %w", s.name, libcName, err)
		}
	}
	c.deleter = purego.NewCallback(deleteLegacy)
	c.deleterVersioned = purego.NewCallback(deleteVersioned)
	return c, nil
})

// deleteLegacy is the deleter of every DLManagedTensor this package writes.
func deleteLegacy(self uintptr) {
	live.removeCtx(self, unsafe.Offsetof(ManagedTensor{}.ManagerCtx))
}

// deleteVersioned is the deleter of every DLManagedTensorVersioned this
// package writes.
func deleteVersioned(self uintptr) {
	live.removeCtx(self, unsafe.Offsetof(ManagedTensorVersioned{}.ManagerCtx))
}

// newBlock allocates one C block holding the managed struct of format f
// followed by the shape and strides arrays, fills it, and registers it
// with owner. It returns the block's address and id.
func (c *clib) newBlock(d Desc, strides []int64, f Format, owner Owner) (uintptr, uint64, error) {
	head := unsafe.Sizeof(ManagedTensorVersioned{})
	if f == Legacy {
		head = unsafe.Sizeof(ManagedTensor{})
	}
	n := uintptr(len(d.Shape))
	size := head + 2*n*unsafe.Sizeof(int64(0))
	p, _, _ := purego.SyscallN(c.mallocFn, size)
	if p == 0 {
		return 0, 0, fmt.Errorf("%w: malloc(%d) for a %d-dimensional %s tensor", ErrNoMemory, size, n, f)
	}
	t := Tensor{Data: d.Data, Device: d.Device, NDim: int32(n), DType: d.DType}
	if n > 0 {
		t.Shape = p + head
		t.Strides = t.Shape + n*unsafe.Sizeof(int64(0))
		copy(unsafe.Slice((*int64)(cmem(t.Shape)), n), d.Shape)
		copy(unsafe.Slice((*int64)(cmem(t.Strides)), n), strides)
	}
	id := live.add(p, owner, c)
	if f == Legacy {
		*(*ManagedTensor)(cmem(p)) = ManagedTensor{DLTensor: t, ManagerCtx: uintptr(id), Deleter: c.deleter}
	} else {
		*(*ManagedTensorVersioned)(cmem(p)) = ManagedTensorVersioned{
			Version:    PackVersion{Major: MajorVersion, Minor: MinorVersion},
			ManagerCtx: uintptr(id),
			Deleter:    c.deleterVersioned,
			DLTensor:   t,
		}
	}
	return p, id, nil
}

// free returns a block to libc.
func (c *clib) free(p uintptr) {
	purego.SyscallN(c.freeFn, p)
}

// readWord reads the 8-byte word at the C address p.
func readWord(p uintptr) uint64 {
	return *(*uint64)(cmem(p))
}

// cmem turns the address of C memory (from malloc) into an unsafe.Pointer.
// The unsafe.Pointer rules forbid this for Go memory, which may move or be
// collected; C memory does neither, and the garbage collector ignores
// pointers outside the Go heap. Reading the uintptr's bits as a pointer,
// rather than converting it, keeps vet's unsafeptr check for the places
// where such a conversion would be a mistake.
func cmem(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}
