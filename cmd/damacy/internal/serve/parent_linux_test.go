package serve

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestWaitPidfd waits on a pidfd of a child: not before the child exits,
// at once after; and a wait is woken, false, when the pidfd is closed.
func TestWaitPidfd(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to wait for: %v", err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	f, err := openPidfd(cmd.Process.Pid)
	if err != nil {
		t.Skipf("no pidfd: %v", err)
	}
	defer f.Close()
	exited := make(chan bool, 1)
	go func() { exited <- waitPidfd(f) }()
	select {
	case <-exited:
		t.Fatal("waitPidfd returned while the process runs")
	case <-time.After(200 * time.Millisecond):
	}
	cmd.Process.Kill()
	select {
	case ok := <-exited:
		if !ok {
			t.Fatal("waitPidfd after the process exited: false")
		}
	case <-time.After(time.Minute):
		t.Fatal("waitPidfd did not return after the process exited")
	}

	// Closed while waiting: false.
	g, err := openPidfd(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	go func() { exited <- waitPidfd(g) }()
	time.Sleep(50 * time.Millisecond)
	g.Close()
	select {
	case ok := <-exited:
		if ok {
			t.Fatal("waitPidfd of a closed pidfd: true")
		}
	case <-time.After(time.Minute):
		t.Fatal("closing the pidfd did not wake waitPidfd")
	}
}
