package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
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
	lowat int // SO_RCVLOWAT of each read, at most: 0 leaves it alone
	n     *readCount
	mu    sync.Mutex
	conns map[int]*rawConn
}

type rawConn struct {
	c     *net.TCPConn
	raw   syscall.RawConn
	lowat int // the value set, 0 for the kernel's default (1)
}

func (r *rawClient) conn(ctx context.Context, w int) (*rawConn, error) {
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
	tc := c.(*net.TCPConn)
	raw, err := tc.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	if r.conns == nil {
		r.conns = map[int]*rawConn{}
	}
	rc := &rawConn{c: tc, raw: raw}
	r.conns[w] = rc
	return rc, nil
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
	if _, err := c.c.Write(h[:]); err != nil {
		return err
	}
	for len(buf) > 0 {
		if r.lowat > 0 {
			if err := c.setLowat(min(r.lowat, len(buf))); err != nil {
				return err
			}
		}
		n, err := c.c.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if n > 0 {
			r.n.reads.Add(1)
			r.n.bytes.Add(int64(n))
		}
		buf = buf[n:]
	}
	return nil
}

// setLowat sets SO_RCVLOWAT to n where it is not n already.
func (c *rawConn) setLowat(n int) error {
	if c.lowat == n {
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
	c.lowat = n
	return nil
}

func (r *rawClient) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.c.Close()
	}
	r.conns = nil
}
