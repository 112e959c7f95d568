package serve

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// sysPidfdOpen is pidfd_open(2)'s number, the same on every Linux
// architecture (the syscall package does not name it).
const sysPidfdOpen = 434

// openPidfd opens a pidfd of process pid (pidfd_open, close-on-exec),
// non-blocking so that the runtime's poller can wait on it.
func openPidfd(pid int) (*os.File, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("pidfd_open(%d): %w", pid, errno)
	}
	if err := syscall.SetNonblock(int(fd), true); err != nil {
		syscall.Close(int(fd))
		return nil, err
	}
	return os.NewFile(fd, fmt.Sprintf("pidfd of %d", pid)), nil
}

// pollFd mirrors struct pollfd of poll.h.
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// pollIn is POLLIN: a pidfd is readable once its process has exited.
const pollIn = 0x1

// waitPidfd waits until the process of pidfd f exits (true), or until f
// is closed or cannot be waited on (false).
func waitPidfd(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		p := pollFd{fd: int32(fd), events: pollIn}
		var now syscall.Timespec // a zero timeout: look, do not wait
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, uintptr(unsafe.Pointer(&now)), 0, 0, 0)
		switch {
		case errno == syscall.EINTR:
			return false
		case errno != 0:
			return true // not exited; the caller falls back to polling
		}
		// POLLIN once it exited; POLLHUP too once it is reaped (Linux 6.9).
		exited = n == 1 && p.revents != 0
		return exited
	})
	return err == nil && exited
}
