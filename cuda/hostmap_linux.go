package cuda

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms the
// driver supports (x86-64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// madvHugePage is MADV_HUGEPAGE.
const madvHugePage = 14

// HostMap returns n bytes of page-locked host memory, like HostAlloc, made
// the fast way: an anonymous mapping aligned to huge pages (advised to use
// transparent huge pages), faulted in by several threads at once and then
// registered with the driver (cuMemHostRegister_v2, portable). For buffers
// of hundreds of MiB this takes a fraction of cuMemHostAlloc's time, which
// zeroes and pins page after page on one thread. Where the mapping or its
// registration is refused it falls back to HostAlloc. Free unregisters and
// unmaps it. It needs a current context.
func HostMap(n int) (*HostBuffer, error) {
	if n <= 0 {
		return HostAlloc(n, HostAllocPortable)
	}
	size := (n + hugePage - 1) &^ (hugePage - 1)
	// One huge page more than needed, so that an aligned stretch fits; the
	// rest is never touched and costs address space only.
	raw, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return HostAlloc(n, HostAllocPortable)
	}
	lead := int((hugePage - uintptr(unsafe.Pointer(&raw[0]))%hugePage) % hugePage)
	m := raw[lead : lead+size]
	_ = syscall.Madvise(m, madvHugePage) // a hint: without it the pages are 4 KiB
	prefault(m)
	d, err := api()
	if err != nil {
		_ = syscall.Munmap(raw)
		return nil, err
	}
	p := unsafe.Pointer(&m[0])
	if err := checkArg("cuMemHostRegister_v2", bytesArg(size), d.cuMemHostRegister_v2(p, uintptr(size), HostRegisterPortable)); err != nil {
		_ = syscall.Munmap(raw)
		return HostAlloc(n, HostAllocPortable)
	}
	return &HostBuffer{p: p, n: n, registered: true, mapping: raw}, nil
}

// prefault touches every page of m from up to GOMAXPROCS goroutines (one
// huge page each at a time), so the kernel zeroes the pages in parallel
// before the driver pins them.
func prefault(m []byte) {
	pages := len(m) / hugePage
	workers := min(runtime.GOMAXPROCS(0), 16, pages)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				pg := int(next.Add(1) - 1)
				if pg >= pages {
					return
				}
				b := m[pg*hugePage : (pg+1)*hugePage]
				for o := 0; o < len(b); o += 4096 {
					b[o] = 0
				}
			}
		}()
	}
	wg.Wait()
}

func unmap(m []byte) error { return syscall.Munmap(m) }
