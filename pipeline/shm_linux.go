//go:build linux && (amd64 || arm64)

package pipeline

import (
	"fmt"
	"syscall"
	"unsafe"
)

// mfdCloexec is MFD_CLOEXEC: the memfd is not inherited across exec (it
// reaches another process only when sent over a Unix socket).
const mfdCloexec = 0x1

// sharedMem allocates size bytes that another process can map: a memfd
// (memfd_create), sized with ftruncate and mapped MAP_SHARED. Unlike a
// file under /dev/shm it has no name to leak and is not bounded by that
// mount's size (64 MiB in a default container). Where the kernel refuses
// memfd_create (before Linux 3.17, or a sandbox that filters it) the
// memory is ordinary Go memory and fd is -1.
func sharedMem(name string, size int64) (mem []byte, fd int, err error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return nil, -1, err
	}
	r, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(p)), mfdCloexec, 0)
	if errno != 0 {
		return make([]byte, size), -1, nil
	}
	fd = int(r)
	if err := syscall.Ftruncate(fd, size); err != nil {
		syscall.Close(fd)
		return nil, -1, fmt.Errorf("ftruncate of a %d-byte memfd: %w", size, err)
	}
	mem, err = syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return nil, -1, fmt.Errorf("mmap of a %d-byte memfd: %w", size, err)
	}
	return mem, fd, nil
}

// freeSharedMem unmaps and closes what sharedMem returned.
func freeSharedMem(mem []byte, fd int) {
	if fd < 0 {
		return
	}
	syscall.Munmap(mem)
	syscall.Close(fd)
}

// hostRegion returns size bytes of anonymous memory outside the Go heap,
// for a large buffer of no pointers: the garbage collector neither scans
// nor counts it (a region counted as live heap would let as much garbage
// pile up before each collection), and its pages cost nothing until
// written. freeHostRegion returns it.
func hostRegion(size int64) ([]byte, error) {
	if size <= 0 {
		return nil, nil
	}
	return syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
}

// freeHostRegion unmaps what hostRegion returned (nil: nothing).
func freeHostRegion(mem []byte) {
	if mem != nil {
		syscall.Munmap(mem)
	}
}
