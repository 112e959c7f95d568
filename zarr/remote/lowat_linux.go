package remote

import (
	"net"
	"sync/atomic"
	"syscall"
)

// A reader of a response body is woken for each piece the server writes:
// over loopback from MinIO, about 100 kB a read. Each wake-up costs the
// poller, a read and a read that finds nothing. lowWaterConn sets the
// socket's low-water mark (SO_RCVLOWAT) to the bytes a large read asks
// for, up to lowWaterMax, so that the reader wakes once that much has
// come, or the peer has closed, or the receive window is full: minio-go
// over MinIO spent 8-11% less CPU per GB with it (BENCH.md).
//
// Only plain HTTP/1.1 reads are marked: a response body's read asks for
// bytes that are sure to come (the body's length bounds it), and headers
// are read 4 KiB at a time. A TLS read asks for more than a record may
// hold, so a connection that carries TLS (its client's first bytes are a
// handshake record, also after a proxy's CONNECT) keeps the kernel's mark.
const (
	lowWaterMin = 64 << 10  // smaller reads wake for any byte
	lowWaterMax = 256 << 10 // the most a read waits for
)

// tlsHandshake is the content type of a TLS handshake record, the first
// byte a TLS client sends.
const tlsHandshake = 0x16

// lowWaterConn is a TCP connection whose large reads wake for their bytes.
type lowWaterConn struct {
	*net.TCPConn
	raw syscall.RawConn
	set int         // the mark set: 1, the kernel's default, until a large read
	tls atomic.Bool // the connection carries TLS: no marks
}

// lowWater wraps c when it is a TCP connection; any other goes back as
// it is.
func lowWater(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &lowWaterConn{TCPConn: tc, raw: raw, set: 1}
}

// Read reads into p after setting the mark for len(p). The mark only
// moves the wake-up: a read still returns what has come when it is called,
// and a mark the kernel refuses leaves reads as they were.
func (c *lowWaterConn) Read(p []byte) (int, error) {
	mark := 1
	if len(p) >= lowWaterMin && !c.tls.Load() {
		mark = min(len(p), lowWaterMax)
	}
	if mark != c.set {
		c.raw.Control(func(fd uintptr) {
			if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, mark) == nil {
				c.set = mark
			}
		})
	}
	return c.TCPConn.Read(p)
}

// Write writes p, noting a TLS handshake record.
func (c *lowWaterConn) Write(p []byte) (int, error) {
	if len(p) > 0 && p[0] == tlsHandshake {
		c.tls.Store(true)
	}
	return c.TCPConn.Write(p)
}
