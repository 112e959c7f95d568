package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
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
	dir := t.TempDir()
	path, arr := testArray(t, dir)
	url, unblock := stallStore(t, dir)
	fdsBefore := openFDs(t)
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
	// The next batch: the sample left and one whose shard does not come.
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(url+"/u16.zarr", boxes[:1])}))
	mustOK(t, "flush", c.call("flush", nil))
	c.start("pop", nil)
	time.Sleep(50 * time.Millisecond)
	c.conn.Close()
	time.Sleep(50 * time.Millisecond)
	unblock() // the pipeline's close waits for reads in flight
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after EOF: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not return after the client closed")
	}
	waitGoroutines(t, before)
	waitFDs(t, fdsBefore)
}

// TestServeBadFrame sends a frame header of length 0, and one over 16
// MiB: the stream cannot go on; serve sends a closing message that says
// why, closes the connection and fails.
func TestServeBadFrame(t *testing.T) {
	for _, n := range []uint32{0, maxFrame + 1, 1<<32 - 1} {
		before := runtime.NumGoroutine()
		c, done := startServe(t)
		mustOK(t, "hello", c.call("hello", hello(hostConfig())))
		c.conn.Write(binary.LittleEndian.AppendUint32(nil, n))
		m := c.closing()
		if m.Status != statusInval || !strings.Contains(m.Reason, fmt.Sprintf("frame of %d bytes", n)) {
			t.Errorf("header %d: closing %+v, want INVAL naming the length", n, m)
		}
		var fe *frameError
		if err := <-done; !errors.As(err, &fe) {
			t.Fatalf("serve after a %d-byte frame header: %v, want a frame error", n, err)
		}
		waitGoroutines(t, before)
	}
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
