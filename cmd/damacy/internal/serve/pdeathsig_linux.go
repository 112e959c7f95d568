package serve

import (
	"fmt"
	"syscall"
)

// SetParentDeathSignal asks the kernel to send SIGTERM when the parent
// (the client that started the server) dies (prctl PR_SET_PDEATHSIG), so
// that a killed trainer leaves no server holding GPU memory. The signal
// follows the death of the parent's thread that started the server.
func SetParentDeathSignal() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", errno)
	}
	return nil
}
