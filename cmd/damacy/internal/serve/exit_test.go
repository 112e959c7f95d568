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
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeClientEOF closes the client's end while the client holds a
// batch and a pop is blocked: serve returns nil, having closed the
// pipeline, released the batch and left no goroutine or descriptor open.
func TestServeClientEOF(t *testing.T) {
	fdsBefore := openFDs(t)
	path, arr := testArray(t, t.TempDir())
	before := runtime.NumGoroutine()
	c, done := startServe(t)
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	boxes := randomBoxes(rand.New(rand.NewPCG(3, 4)), 4, arr.Shape(), []int64{5, 6, 7})
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes)}))
	m := mustOK(t, "pop", c.call("pop", nil))
	if len(m.fds) != 1 {
		t.Fatalf("pop: %d descriptors", len(m.fds))
	}
	syscall.Close(m.fds[0])
	c.start("pop", nil) // one sample left, not flushed: blocks
	time.Sleep(50 * time.Millisecond)
	c.conn.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after EOF: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not return after the client closed")
	}
	waitGoroutines(t, before)
	if n := openFDs(t); n > fdsBefore {
		t.Errorf("%d descriptors open after serve returned, %d before", n, fdsBefore)
	}
}

// TestServeBadFrame sends a frame of length 0: the stream cannot go on,
// serve fails.
func TestServeBadFrame(t *testing.T) {
	before := runtime.NumGoroutine()
	c, done := startServe(t)
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	c.conn.Write([]byte{0, 0, 0, 0})
	var fe *frameError
	if err := <-done; !errors.As(err, &fe) {
		t.Fatalf("serve after a 0-byte frame: %v, want a frame error", err)
	}
	waitGoroutines(t, before)
}

// TestServeSocket serves one client on a listening socket (AcceptOne),
// which removes the socket file.
func TestServeSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	done := make(chan error, 1)
	go func() {
		conn, err := AcceptOne(context.Background(), path)
		if err != nil {
			done <- err
			return
		}
		done <- Run(context.Background(), conn, Options{})
	}()
	var conn net.Conn
	var err error
	for range 200 {
		if conn, err = net.Dial("unix", path); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &protoClient{t: t, conn: conn.(*net.UnixConn), early: map[int64]*protoMsg{}}
	defer conn.Close()
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	mustOK(t, "close", c.call("close", nil))
	if err := <-done; err != nil {
		t.Fatalf("serve on a listening socket: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("the socket file is left behind")
	}
}

// TestAcceptOneCancel: AcceptOne returns ctx's cause when ctx ends first.
func TestAcceptOneCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop")
	time.AfterFunc(50*time.Millisecond, func() { cancel(stop) })
	if _, err := AcceptOne(ctx, filepath.Join(t.TempDir(), "s")); !errors.Is(err, stop) {
		t.Fatalf("AcceptOne after cancel: %v, want the cause", err)
	}
}

// TestInheritedConn refuses a descriptor that is not a Unix socket.
func TestInheritedConn(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := InheritedConn(int(f.Fd())); err == nil {
		t.Fatal("InheritedConn of a file: no error")
	}
	if _, err := InheritedConn(987); err == nil || !strings.Contains(err.Error(), "--fd 987") {
		t.Fatalf("InheritedConn(987): %v, want an error naming --fd 987", err)
	}
}

// serveChildEnv makes TestServeChild run `damacy serve --fd 3`.
const serveChildEnv = "DAMACY_TEST_SERVE_CHILD"

// TestServeChild is the server process of TestServeExec: what `damacy
// serve --fd 3` runs.
func TestServeChild(t *testing.T) {
	if os.Getenv(serveChildEnv) == "" {
		t.Skip("runs only as TestServeExec's child process")
	}
	conn, err := InheritedConn(3)
	if err == nil {
		err = Run(context.Background(), conn, Options{})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "damacy serve: error: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestServeExec runs the server as its own process on an inherited socket
// (--fd 3), as the Python client does: the memfd crosses processes, and
// the server exits 0 when the client closes its end.
func TestServeExec(t *testing.T) {
	path, arr := testArray(t, t.TempDir())
	client, server := socketpair(t)
	defer client.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), serveChildEnv+"=1")
	cmd.ExtraFiles = []*os.File{server}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	server.Close()
	c := &protoClient{t: t, conn: client, early: map[int64]*protoMsg{}}
	h := mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	if h.PID != cmd.Process.Pid {
		t.Errorf("hello says pid %d, the child is %d", h.PID, cmd.Process.Pid)
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
	client.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil || out.Len() != 0 {
			t.Fatalf("server process: %v, stdout %q, stderr %q", err, out.String(), errb.String())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("the server process did not exit after the client closed; stderr %q", errb.String())
	}
}
