package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// The raw protocol is the floor under every HTTP client: the same bytes
// in the same pieces over plain TCP, without requests to parse or sign.
// A request is 16 bytes, the offset and the length (big-endian); the
// reply is that many bytes of a fixed random buffer, from offset modulo
// its size, written in pieces of the server's write size.
const (
	rawHeader = 16
	rawData   = 64 << 20
)

// serveRaw answers raw requests on l until ctx ends, writing each reply in
// writes of writeSize bytes (0: one write).
func serveRaw(ctx context.Context, l net.Listener, writeSize int) error {
	data := rawPattern()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			defer c.Close()
			var h [rawHeader]byte
			for {
				if _, err := io.ReadFull(c, h[:]); err != nil {
					return
				}
				off := int(binary.BigEndian.Uint64(h[:8]) % rawData)
				n := binary.BigEndian.Uint64(h[8:])
				if n > rawData {
					return
				}
				reply := data[off : off+int(n)]
				for len(reply) > 0 {
					w := len(reply)
					if writeSize > 0 {
						w = min(w, writeSize)
					}
					if _, err := c.Write(reply[:w]); err != nil {
						return
					}
					reply = reply[w:]
				}
			}
		})
	}
}

// rawPattern is what the raw server serves: rawData random bytes, twice,
// so that a reply never wraps.
func rawPattern() []byte {
	data := make([]byte, 2*rawData)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < rawData; i += 8 {
		binary.LittleEndian.PutUint64(data[i:], rng.Uint64())
	}
	copy(data[rawData:], data[:rawData])
	return data
}

// rawClient issues raw requests, one connection per worker.
type rawClient struct {
	addr  string
	lowat int // SO_RCVLOWAT of each large read, at most (see probeConn)
	n     *readCount
	mu    sync.Mutex
	conns map[int]net.Conn
}

func (r *rawClient) conn(ctx context.Context, w int) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[w]; c != nil {
		return c, nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, err
	}
	pc, err := probe(c, r.n, r.lowat)
	if err != nil {
		c.Close()
		return nil, err
	}
	if r.conns == nil {
		r.conns = map[int]net.Conn{}
	}
	r.conns[w] = pc
	return pc, nil
}

// get reads len(buf) bytes at off over worker w's connection.
func (r *rawClient) get(ctx context.Context, w int, off int64, buf []byte) error {
	c, err := r.conn(ctx, w)
	if err != nil {
		return err
	}
	var h [rawHeader]byte
	binary.BigEndian.PutUint64(h[:8], uint64(off))
	binary.BigEndian.PutUint64(h[8:], uint64(len(buf)))
	if _, err := c.Write(h[:]); err != nil {
		return err
	}
	_, err = io.ReadFull(c, buf)
	return err
}

func (r *rawClient) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// readCount counts the reads of connections that returned bytes, and
// the bytes: how finely the replies arrive.
type readCount struct{ reads, bytes atomic.Int64 }

// probeConn is a TCP connection that counts its reads into n and, with a
// low-water mark, sets SO_RCVLOWAT before each read of 64 KiB or more to
// min(the read's size, lowat), so that the reader wakes for that many
// bytes rather than for each piece the server writes (smaller reads, as
// of HTTP headers, wake for any byte). A read's size never exceeds the
// bytes still to come of a raw reply or of an HTTP body with a length.
type probeConn struct {
	*net.TCPConn
	n     *readCount
	raw   syscall.RawConn
	lowat int
	set   int // the mark set: 1, the kernel's default
}

// probe wraps c, a TCP connection.
func probe(c net.Conn, n *readCount, lowat int) (*probeConn, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, fmt.Errorf("%T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &probeConn{TCPConn: tc, n: n, raw: raw, lowat: lowat, set: 1}, nil
}

func (c *probeConn) Read(p []byte) (int, error) {
	if c.lowat > 0 {
		mark := 1
		if len(p) >= 64<<10 {
			mark = min(len(p), c.lowat)
		}
		if err := c.setLowat(mark); err != nil {
			return 0, err
		}
	}
	k, err := c.TCPConn.Read(p)
	if k > 0 {
		c.n.reads.Add(1)
		c.n.bytes.Add(int64(k))
	}
	return k, err
}

// setLowat sets SO_RCVLOWAT to n where it is not n already.
func (c *probeConn) setLowat(n int) error {
	if c.set == n {
		return nil
	}
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_RCVLOWAT %d: %w", n, serr)
	}
	c.set = n
	return nil
}
