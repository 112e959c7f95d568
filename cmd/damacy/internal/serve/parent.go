package serve

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// parentPoll is how often the parent is checked where no pidfd can watch it.
const parentPoll = 100 * time.Millisecond

// watchParent fails unless pid is this process's parent, and otherwise
// returns a context that is cancelled, with a cause naming pid, when that
// process exits, and the function that stops watching. It watches the
// process, not the thread that started this one (which may exit long
// before it): through a pidfd where the kernel has them (Linux 5.3), else
// by checking every parentPoll that the parent is still pid (an orphan
// gets another parent).
func watchParent(ctx context.Context, pid int) (context.Context, func(), error) {
	f, pidfdErr := openPidfd(pid)
	// After the pidfd is open: it then refers to the parent, not to a
	// process that took the pid of a parent that has died.
	if ppid := syscall.Getppid(); ppid != pid {
		if f != nil {
			f.Close()
		}
		return nil, nil, fmt.Errorf("serve: --parent-pid %d: the parent process is %d (the client exited before the server started?)", pid, ppid)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	died := func() { cancel(fmt.Errorf("the parent process %d exited", pid)) }
	quit := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if pidfdErr == nil && waitPidfd(f) {
			died()
			return
		}
		t := time.NewTicker(parentPoll)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if syscall.Getppid() != pid {
					died()
					return
				}
			case <-quit:
				return
			}
		}
	}()
	stop := func() {
		close(quit)
		if f != nil {
			f.Close() // wakes waitPidfd
		}
		<-watched
		cancel(nil)
	}
	return ctx, stop, nil
}
