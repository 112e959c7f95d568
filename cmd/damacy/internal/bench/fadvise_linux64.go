//go:build linux && (amd64 || arm64)

package bench

import (
	"os"
	"syscall"
)

// posixFadvDontNeed is POSIX_FADV_DONTNEED on Linux.
const posixFadvDontNeed = 4

// dropFileCache asks the kernel to drop the page cache of the file at path
// (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)). SYS_FADVISE64 takes its
// offset and length in single registers only on 64-bit targets.
func dropFileCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Dirty pages are not dropped: write them out first.
	if err := f.Sync(); err != nil {
		return err
	}
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, posixFadvDontNeed, 0, 0)
	if errno != 0 {
		return &os.SyscallError{Syscall: "fadvise64 " + path, Err: errno}
	}
	return nil
}
