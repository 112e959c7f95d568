package remotetest

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// Blackhole returns a loopback address (127.0.0.1:PORT) whose connections
// never complete, as with a server that drops packets: it listens with a
// backlog of one and never accepts, and a connection fills that backlog,
// so Linux drops the SYNs of later ones and a client's connect waits
// until it gives up. It is closed when the test ends.
func Blackhole(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // the backlog is full: connects now hang
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("remotetest: cannot fill a listen backlog here: connects do not hang")
	return ""
}
