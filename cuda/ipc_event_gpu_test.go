package cuda_test

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
)

// TestDeviceUUID reads every device's UUID and round-trips its text form.
func TestDeviceUUID(t *testing.T) {
	cudatest.MustHaveGPU(t)
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[cuda.UUID]int{}
	for i := range n {
		dev, err := cuda.GetDevice(i)
		if err != nil {
			t.Fatal(err)
		}
		u, err := dev.UUID()
		if err != nil {
			t.Fatal(err)
		}
		if u == (cuda.UUID{}) {
			t.Errorf("device %d: zero UUID", i)
		}
		if j, ok := seen[u]; ok {
			t.Errorf("devices %d and %d share UUID %v", j, i, u)
		}
		seen[u] = i
		back, err := cuda.ParseUUID(u.String())
		if err != nil || back != u {
			t.Errorf("ParseUUID(%q) = %v, %v", u.String(), back, err)
		}
		t.Logf("device %d: %v", i, u)
	}
}

// ipcEventChildEnv carries the parent's event handle (hex) to
// TestIPCEventChild.
const ipcEventChildEnv = "CUDA_TEST_IPC_EVENT_CHILD"

// TestIPCEventChild is the other process of TestIPCEvent: it opens the
// parent's event and waits on it, then exports an event of its own
// (printed as IPC-EVENT hex) and keeps it alive until its stdin closes.
func TestIPCEventChild(t *testing.T) {
	arg := os.Getenv(ipcEventChildEnv)
	if arg == "" {
		t.Skip("runs only as TestIPCEvent's child process")
	}
	var h cuda.IPCEventHandle
	if raw, err := hex.DecodeString(arg); err != nil || len(raw) != len(h.Reserved) {
		t.Fatalf("bad handle %q", arg)
	} else {
		copy(h.Reserved[:], raw)
	}
	e := cudatest.Executor(t)
	var own cuda.Event
	var s cuda.Stream
	do(t, e, func() error {
		ev, err := cuda.OpenIPCEventHandle(h)
		if err != nil {
			return err
		}
		if s, err = cuda.NewStream(cuda.StreamNonBlocking); err != nil {
			return err
		}
		if err := s.WaitEvent(ev); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if err := ev.Synchronize(); err != nil {
			return err
		}
		if err := ev.Destroy(); err != nil {
			return err
		}
		if own, err = cuda.NewEvent(cuda.EventInterprocess | cuda.EventDisableTiming); err != nil {
			return err
		}
		if err := own.Record(s); err != nil {
			return err
		}
		oh, err := own.IPCHandle()
		if err != nil {
			return err
		}
		fmt.Printf("IPC-EVENT %x\n", oh.Reserved)
		return nil
	})
	io.Copy(io.Discard, os.Stdin)
	do(t, e, func() error {
		if err := s.Synchronize(); err != nil {
			return err
		}
		if err := own.Destroy(); err != nil {
			return err
		}
		return s.Destroy()
	})
}

// TestIPCEvent shares an interprocess event with a child process (this
// test binary) in both directions: the child opens and waits on the
// parent's event, and the parent opens and waits on the child's.
func TestIPCEvent(t *testing.T) {
	if os.Getenv(ipcEventChildEnv) != "" {
		t.Skip("in the child")
	}
	e := cudatest.Executor(t)
	var ev cuda.Event
	var s cuda.Stream
	var p cuda.DevicePtr
	var h cuda.IPCEventHandle
	do(t, e, func() (err error) {
		if ev, err = cuda.NewEvent(cuda.EventInterprocess | cuda.EventDisableTiming); err != nil {
			return err
		}
		if s, err = cuda.NewStream(cuda.StreamNonBlocking); err != nil {
			return err
		}
		if p, err = cuda.MemAlloc(64 << 20); err != nil {
			return err
		}
		if err := s.MemsetD8(p, 0x5a, 64<<20); err != nil {
			return err
		}
		if err := ev.Record(s); err != nil {
			return err
		}
		h, err = ev.IPCHandle()
		return err
	})
	defer e.Do(func() error {
		s.Synchronize()
		p.Free()
		s.Destroy()
		return ev.Destroy()
	})
	child := cudatest.StartChild(t, "TestIPCEventChild", fmt.Sprintf("%s=%x", ipcEventChildEnv, h.Reserved))
	childHandle, _ := strings.CutPrefix(child.Await("IPC-EVENT "), "IPC-EVENT ")
	if childHandle != "" {
		var ch cuda.IPCEventHandle
		raw, err := hex.DecodeString(childHandle)
		if err != nil || len(raw) != len(ch.Reserved) {
			t.Errorf("bad handle from the child: %q", childHandle)
		} else {
			copy(ch.Reserved[:], raw)
			err := e.Do(func() error {
				cev, err := cuda.OpenIPCEventHandle(ch)
				if err != nil {
					return err
				}
				if err := s.WaitEvent(cev); err != nil {
					return err
				}
				if err := s.Synchronize(); err != nil {
					return err
				}
				return cev.Destroy()
			})
			if err != nil {
				t.Errorf("waiting on the child's event: %v", err)
			}
		}
	}
	if out, err := child.Finish(); err != nil || childHandle == "" {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Log("the child waited on this process's event, and this process on the child's")
}
