package serve

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeIPCFile makes a file in /dev/shm named like those the CUDA driver
// makes for process pid's interprocess events, for a test that the
// server process removes them on its way out; "" where there is no
// /dev/shm.
func fakeIPCFile(t *testing.T, pid int) string {
	t.Helper()
	name := fmt.Sprintf("/dev/shm/cuda.shm.%d.%x.99", os.Getuid(), pid)
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Logf("no file in /dev/shm: %v", err)
		return ""
	}
	t.Cleanup(func() { os.Remove(name) })
	return name
}

// wantRemoved fails the test if the fake file is still there.
func wantRemoved(t *testing.T, name, how string) {
	t.Helper()
	if name == "" {
		return
	}
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %s is left (%v)", how, name, err)
	}
}

// flood sends stats requests without reading the answers until the
// connection fails, on a goroutine; the returned channel is closed then.
func flood(c *protoClient) <-chan struct{} {
	stopped := make(chan struct{})
	b, _ := json.Marshal(map[string]any{"id": 1 << 40, "op": "stats"})
	frame := append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
	go func() {
		defer close(stopped)
		for {
			if _, err := c.conn.Write(frame); err != nil {
				return
			}
		}
	}()
	return stopped
}

// TestServeWriteDeadline: a client that stops reading makes a write time
// out (Options.WriteTimeout), and the server stops.
func TestServeWriteDeadline(t *testing.T) {
	before := runtime.NumGoroutine()
	c, done := startServeWith(t, Options{WriteTimeout: time.Second})
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	stopped := flood(c)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the client read nothing for 1s") {
			t.Fatalf("serve with a client that does not read: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop with a client that does not read")
	}
	c.conn.Close()
	<-stopped
	waitGoroutines(t, before)
}

// TestServeSignal stops server processes with SIGTERM and SIGINT while a
// pop waits for a shard that does not come: the pop is answered SHUTDOWN,
// then closing says why and is the last frame; the server exits 1, says
// why on stderr and removes its files in /dev/shm.
func TestServeSignal(t *testing.T) {
	dir := t.TempDir()
	testArray(t, dir)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
		url, unblock := stallStore(t, dir)
		sp := startServer(t)
		c := sp.c
		shm := fakeIPCFile(t, sp.cmd.Process.Pid)
		mustOK(t, "hello", c.call("hello", hello(hostConfig())))
		box := [][2]int64{{0, 4}, {0, 5}, {0, 6}}
		mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(url+"/u16.zarr", [][][2]int64{box})}))
		mustOK(t, "flush", c.call("flush", nil))
		pop := c.start("pop", nil)
		time.Sleep(50 * time.Millisecond)
		sp.cmd.Process.Signal(sig)
		m := c.closing()
		if m.Status != statusShutdown || m.Reason != "received "+name {
			t.Errorf("%s: closing %+v", name, m)
		}
		wantError(t, name+": the blocked pop", c.wait(pop), statusShutdown)
		unblock() // the pipeline's close waits for its reads
		if code := sp.wait(t); code != 1 || !strings.Contains(sp.stderr.String(), "stopped: received "+name) {
			t.Errorf("%s: exit %d, stderr %q", name, code, sp.stderr.String())
		}
		wantRemoved(t, shm, name)
	}
}

// TestServeSecondSignal: a second SIGTERM while the server is stopping
// (its pipeline waits for a read that does not come) exits at once, and
// the files in /dev/shm are removed on that way out too.
func TestServeSecondSignal(t *testing.T) {
	dir := t.TempDir()
	testArray(t, dir)
	url, _ := stallStore(t, dir)
	sp := startServer(t)
	c := sp.c
	shm := fakeIPCFile(t, sp.cmd.Process.Pid)
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	box := [][2]int64{{0, 4}, {0, 5}, {0, 6}}
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(url+"/u16.zarr", [][][2]int64{box})}))
	mustOK(t, "flush", c.call("flush", nil))
	c.start("pop", nil)
	time.Sleep(50 * time.Millisecond)
	sp.cmd.Process.Signal(syscall.SIGTERM)
	c.closing() // sent before the pipeline is closed, which waits 5 s for the read
	sp.cmd.Process.Signal(syscall.SIGTERM)
	if code := sp.wait(t); code != 1 || !strings.Contains(sp.stderr.String(), "received SIGTERM again while stopping: exiting now") {
		t.Errorf("exit %d, stderr %q", code, sp.stderr.String())
	}
	wantRemoved(t, shm, "second SIGTERM")
}

// TestServeStuckClientSignal: a server whose write waits for a client that
// reads nothing (with a 10-minute write timeout) still stops on SIGTERM.
func TestServeStuckClientSignal(t *testing.T) {
	sp := startServer(t, serveWriteTimeoutEnv+"=10m")
	c := sp.c
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	stopped := flood(c)
	time.Sleep(time.Second) // both socket buffers fill: the server's write waits
	sp.cmd.Process.Signal(syscall.SIGTERM)
	if code := sp.wait(t); code != 1 {
		t.Errorf("exit %d, stderr %q", code, sp.stderr.String())
	}
	c.conn.Close()
	<-stopped
}

// TestServeParentCheck: a server whose --parent-pid is not its parent
// (the client died before it started) exits 1 at once, saying so.
func TestServeParentCheck(t *testing.T) {
	sp := startServer(t, serveParentEnv+"=1")
	if code := sp.wait(t); code != 1 || !strings.Contains(sp.stderr.String(), "--parent-pid 1: the parent process is "+strconv.Itoa(os.Getpid())) {
		t.Errorf("exit %d, stderr %q", code, sp.stderr.String())
	}
}

// serveMiddleEnv makes TestServeParentChild run.
const serveMiddleEnv = "DAMACY_TEST_SERVE_MIDDLE"

// TestServeParentChild is the middle process of TestServeParentDeath: it
// starts a server (TestServeChild) on its fd 3 that watches it
// (--parent-pid), prints the server's pid, and exits 0 at the end of its
// stdin (or when it is killed).
func TestServeParentChild(t *testing.T) {
	if os.Getenv(serveMiddleEnv) == "" {
		t.Skip("runs only as TestServeParentDeath's middle process")
	}
	cmd := serverCommand(serveParentEnv + "=" + strconv.Itoa(os.Getpid()))
	cmd.Env = slices.DeleteFunc(cmd.Env, func(v string) bool { return strings.HasPrefix(v, serveMiddleEnv+"=") })
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "socket")}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("%d\n", cmd.Process.Pid)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// TestServeParentDeath starts a server from a middle process that then
// exits, or is killed: the server sees its parent go, sends closing, exits
// 1 and removes its files in /dev/shm. This process is a subreaper for the
// test, so that the orphaned server becomes its child and can be waited
// for.
func TestServeParentDeath(t *testing.T) {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
	for _, mode := range []string{"exit", "kill"} {
		client, server := socketpair(t)
		c := &protoClient{t: t, conn: client, early: map[int64]*protoMsg{}}
		out, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		mid := exec.Command(os.Args[0], "-test.run=^TestServeParentChild$", "-test.count=1")
		mid.Env = append(os.Environ(), serveMiddleEnv+"=1")
		mid.ExtraFiles = []*os.File{server}
		mid.Stdout, mid.Stderr = pw, out
		stdin, err := mid.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := mid.Start(); err != nil {
			t.Fatal(err)
		}
		server.Close()
		pw.Close()
		line, err := bufio.NewReader(pr).ReadString('\n')
		pr.Close()
		pid, perr := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || perr != nil {
			mid.Process.Kill()
			mid.Wait()
			t.Fatalf("%s: the middle process printed %q (%v)", mode, line, err)
		}
		shm := fakeIPCFile(t, pid)
		mustOK(t, mode+": hello", c.call("hello", hello(hostConfig())))
		if mode == "kill" {
			mid.Process.Kill()
		}
		stdin.Close()
		mid.Wait()
		m := c.closing()
		if m.Status != statusShutdown || m.Reason != fmt.Sprintf("the parent process %d exited", mid.Process.Pid) {
			t.Errorf("%s: closing %+v", mode, m)
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatalf("%s: waiting for the orphaned server: %v", mode, err)
		}
		b, _ := os.ReadFile(out.Name())
		if !ws.Exited() || ws.ExitStatus() != 1 || !strings.Contains(string(b), "parent process") {
			t.Errorf("%s: server %v, stderr %q", mode, ws, b)
		}
		wantRemoved(t, shm, mode)
		client.Close()
		out.Close()
	}
}

// TestServeParentThreadExit starts a server from a goroutine locked to
// its OS thread, which exits once the server has answered hello (a Python
// pool thread that made a Pipeline, say): the server watches the process,
// not the thread, and keeps serving.
func TestServeParentThreadExit(t *testing.T) {
	sp := newServer(t, serveParentEnv+"="+strconv.Itoa(os.Getpid()))
	started := make(chan error, 1)
	exit := make(chan struct{})
	// The main thread does not exit with its goroutine (the runtime parks
	// it): a goroutine that lands on it keeps it until the test ends, so
	// that the next one runs on another thread.
	mainHeld := make(chan struct{})
	defer close(mainHeld)
	tid := 0
	for tid == 0 {
		got := make(chan int)
		go func() {
			runtime.LockOSThread() // never unlocked but on the main thread: the thread exits with the goroutine
			if syscall.Gettid() == os.Getpid() {
				got <- 0
				<-mainHeld
				runtime.UnlockOSThread()
				return
			}
			got <- syscall.Gettid()
			started <- sp.start()
			<-exit
		}()
		tid = <-got
	}
	task := filepath.Join("/proc/self/task", strconv.Itoa(tid))
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	c := sp.c
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	close(exit)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread %s did not exit", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * parentPoll) // what a parent watch polling getppid needs to notice
	mustOK(t, "stats after the thread exited", c.call("stats", nil))
	mustOK(t, "close", c.call("close", nil))
	c.conn.Close()
	if code := sp.wait(t); code != 0 {
		t.Errorf("exit %d, stderr %q", code, sp.stderr.String())
	}
}
