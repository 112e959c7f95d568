package pipeline

import (
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f (a whole number of pages)
// read-only and shared: the page cache's pages themselves.
func mapFile(f *os.File, size int64) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmapFile(b []byte) { _ = syscall.Munmap(b) }

// physicalMemory returns the host's RAM in bytes (0 when unknown).
func physicalMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
