package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The environment of TestServeChild: set, it runs Main as `damacy serve
// --fd 3` does, with the options below.
const (
	serveChildEnv        = "DAMACY_TEST_SERVE_CHILD"
	serveParentEnv       = "DAMACY_TEST_SERVE_PARENT_PID"    // Options.ParentPID
	serveWriteTimeoutEnv = "DAMACY_TEST_SERVE_WRITE_TIMEOUT" // Options.WriteTimeout
)

// TestServeChild is the server process of the tests that run one: what
// `damacy serve --fd 3 [--parent-pid P]` runs, its error on stderr and
// exit status 1 when Main fails.
func TestServeChild(t *testing.T) {
	if os.Getenv(serveChildEnv) == "" {
		t.Skip("runs only as a server process of the other tests")
	}
	opts := Options{Stderr: os.Stderr}
	if v := os.Getenv(serveParentEnv); v != "" {
		opts.ParentPID, _ = strconv.Atoi(v)
	}
	if v := os.Getenv(serveWriteTimeoutEnv); v != "" {
		opts.WriteTimeout, _ = time.ParseDuration(v)
	}
	connect := func(context.Context) (*net.UnixConn, error) { return InheritedConn(3) }
	if err := Main(context.Background(), connect, opts); err != nil {
		fmt.Fprintf(os.Stderr, "damacy serve: error: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serverProcess is a server process started by a test and its client.
type serverProcess struct {
	cmd    *exec.Cmd
	c      *protoClient
	stderr bytes.Buffer
	exited chan error // cmd.Wait's error, once
}

// serverCommand is the command that runs TestServeChild with env added.
func serverCommand(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), serveChildEnv+"=1"), env...)
	return cmd
}

// startServer starts a server process (TestServeChild) with env added,
// on a socketpair, and returns it with a client on the other end. Pass
// serveParentEnv=<os.Getpid()> to have it watch this process.
func startServer(t *testing.T, env ...string) *serverProcess {
	t.Helper()
	sp := newServer(t, env...)
	if err := sp.start(); err != nil {
		t.Fatal(err)
	}
	return sp
}

// newServer prepares what startServer starts.
func newServer(t *testing.T, env ...string) *serverProcess {
	t.Helper()
	client, server := socketpair(t)
	sp := &serverProcess{cmd: serverCommand(env...), exited: make(chan error, 1)}
	sp.cmd.ExtraFiles = []*os.File{server}
	sp.cmd.Stdout, sp.cmd.Stderr = &sp.stderr, &sp.stderr
	sp.c = &protoClient{t: t, conn: client, early: map[int64]*protoMsg{}}
	t.Cleanup(func() {
		client.Close()
		if sp.cmd.Process != nil {
			sp.cmd.Process.Kill()
			<-sp.exited
		}
	})
	return sp
}

// start starts the process; it may run on any goroutine.
func (sp *serverProcess) start() error {
	err := sp.cmd.Start()
	sp.cmd.ExtraFiles[0].Close()
	if err != nil {
		return err
	}
	go func() { sp.exited <- sp.cmd.Wait() }()
	return nil
}

// wait waits for the server process to exit (a minute at most: it must not
// hang) and returns its exit status, -1 when a signal killed it.
func (sp *serverProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-sp.exited:
		sp.exited <- err // for the cleanup
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		t.Fatalf("server process: %v; output:\n%s", err, sp.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("the server process did not exit; output:\n%s", sp.stderr.String())
	}
	return -1
}

// TestServeExec runs the server as its own process on an inherited socket
// (--fd 3), as the Python client does: the memfd crosses processes, and
// the server exits 0, having written nothing, when the client closes its
// end.
func TestServeExec(t *testing.T) {
	path, arr := testArray(t, t.TempDir())
	sp := startServer(t, serveParentEnv+"="+strconv.Itoa(os.Getpid()))
	c := sp.c
	h := mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	if h.PID != sp.cmd.Process.Pid {
		t.Errorf("hello says pid %d, the child is %d", h.PID, sp.cmd.Process.Pid)
	}
	boxes := randomBoxes(rand.New(rand.NewPCG(5, 6)), 2, arr.Shape(), []int64{4, 8, 8})
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes)}))
	mustOK(t, "flush", c.call("flush", nil))
	m := mustOK(t, "pop", c.call("pop", nil))
	if len(m.fds) != 1 || m.Batch == nil || m.Batch.Host == nil {
		t.Fatalf("pop: %+v with %d descriptors", m, len(m.fds))
	}
	mem, err := syscall.Mmap(m.fds[0], 0, int(m.Batch.Host.Size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	syscall.Close(m.fds[0])
	var want []byte
	for _, b := range boxes {
		want = append(want, wantF32(t, arr, b)...)
	}
	if got := mem[m.Batch.Host.Offset : m.Batch.Host.Offset+m.Batch.NBytes]; !bytes.Equal(got, want) {
		t.Fatal("the batch read through the server's memfd differs from the reference reader")
	}
	c.send(map[string]any{"op": "release", "batch": m.Batch.ID})
	c.conn.Close()
	if code := sp.wait(t); code != 0 || sp.stderr.Len() != 0 {
		t.Fatalf("server process: exit %d, output %q", code, sp.stderr.String())
	}
}
