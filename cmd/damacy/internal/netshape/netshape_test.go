package netshape

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestParseLink(t *testing.T) {
	tests := []struct {
		in   string
		out  Link
		fail bool
	}{
		{in: "10ms", out: Link{RTT: 10 * time.Millisecond}},
		{in: "10ms,10Gbit", out: Link{RTT: 10 * time.Millisecond, BitsPerSecond: 10e9}},
		{in: " 1ms , 2.5Gbit/s", out: Link{RTT: time.Millisecond, BitsPerSecond: 2.5e9}},
		{in: "50ms,800Mbit", out: Link{RTT: 50 * time.Millisecond, BitsPerSecond: 800e6}},
		{in: "0s,100kbit", out: Link{BitsPerSecond: 100e3}},
		{in: "0s,1e9bit", out: Link{BitsPerSecond: 1e9}},
		{in: "", fail: true},
		{in: "fast", fail: true},
		{in: "-1ms", fail: true},
		{in: "10ms,10", fail: true},
		{in: "10ms,-1Gbit", fail: true},
		{in: "10ms,10GB", fail: true},
		{in: "10ms,Gbit", fail: true},
	}
	for i := range tests {
		tt := &tests[i]
		got, err := ParseLink(tt.in)
		if (err != nil) != tt.fail || got != tt.out {
			t.Errorf("ParseLink(%q) = %+v, %v; want %+v, fail %v", tt.in, got, err, tt.out, tt.fail)
		}
	}
	if s := (Link{RTT: 10 * time.Millisecond, BitsPerSecond: 10e9}).String(); s != "10ms RTT, 10 Gbit/s each way" {
		t.Errorf("String() = %q", s)
	}
}

// server listens on loopback and runs handle on each connection.
func server(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

func listen(t *testing.T, target string, l Link) *Proxy {
	t.Helper()
	p, err := Listen(target, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func random(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

// TestData: what goes through arrives whole and in order both ways, over
// several connections at once, each side's end (a half-close) included;
// the counters add up.
func TestData(t *testing.T) {
	const conns, upBytes, downBytes = 6, 1 << 20, 3 << 20
	target := server(t, func(c net.Conn) {
		h := sha256.New()
		if _, err := io.Copy(h, c); err != nil {
			return
		}
		// Echo the digest of what came, then a payload named by it.
		sum := h.Sum(nil)
		c.Write(sum)
		c.Write(random(uint64(sum[0]), downBytes))
	})
	p := listen(t, target, Link{RTT: 4 * time.Millisecond, BitsPerSecond: 2e9})
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			up := random(uint64(100+i), upBytes)
			if _, err := c.Write(up); err != nil {
				t.Error(err)
				return
			}
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Errorf("conn %d: %v", i, err)
				return
			}
			want := sha256.Sum256(up)
			if len(got) != 32+downBytes || !bytes.Equal(got[:32], want[:]) {
				t.Errorf("conn %d: %d bytes back, digest %x; want %d, %x", i, len(got), got[:min(32, len(got))], 32+downBytes, want)
				return
			}
			if !bytes.Equal(got[32:], random(uint64(want[0]), downBytes)) {
				t.Errorf("conn %d: the payload differs", i)
			}
		})
	}
	wg.Wait()
	st := p.Stats()
	if st.Conns != conns || st.Up != conns*upBytes || st.Down != conns*(32+downBytes) {
		t.Errorf("stats %+v; want %d conns, %d up, %d down", st, conns, conns*upBytes, conns*(32+downBytes))
	}
}

// TestDelay: a round trip through the proxy takes the link's RTT, and
// not much more.
func TestDelay(t *testing.T) {
	const rtt = 20 * time.Millisecond
	target := server(t, func(c net.Conn) { io.Copy(c, c) })
	p := listen(t, target, Link{RTT: rtt})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var trips []time.Duration
	b := []byte{1}
	for range 10 {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		trips = append(trips, time.Since(t0))
	}
	slices.Sort(trips)
	// Timers never fire early; a loaded machine makes them late.
	if trips[0] < rtt || trips[len(trips)/2] > rtt+50*time.Millisecond {
		t.Errorf("round trips %v; want all at least %v, the median within 50 ms of it", trips, rtt)
	}
}

// transfer reads n bytes from a server that sends them on connect, over
// conns connections at once, through p; it returns the time taken.
func transfer(t *testing.T, p *Proxy, conns, n int) time.Duration {
	t.Helper()
	t0 := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			got, err := io.Copy(io.Discard, c)
			if err != nil || got != int64(n) {
				t.Errorf("read %d bytes, %v; want %d", got, err, n)
			}
		})
	}
	wg.Wait()
	return time.Since(t0)
}

// TestRate: the cap holds, for one connection and shared by several; and
// bandwidth x delay is in flight (a transfer over a long round trip takes
// the bytes' time plus one delay, not a round trip per piece).
func TestRate(t *testing.T) {
	const n = 4 << 20
	payload := random(7, n)
	target := server(t, func(c net.Conn) { c.Write(payload) })
	for _, tt := range []struct {
		link  Link
		conns int
	}{
		{Link{BitsPerSecond: 200e6}, 1},
		{Link{BitsPerSecond: 400e6}, 4},
		{Link{RTT: 200 * time.Millisecond, BitsPerSecond: 400e6}, 2},
	} {
		p := listen(t, target, tt.link)
		el := transfer(t, p, tt.conns, n)
		// The bytes' time on the link, and one way's delay (the server
		// sends as soon as the proxy connects to it).
		ideal := time.Duration(float64(tt.conns*n)*8/tt.link.BitsPerSecond*1e9) + tt.link.RTT/2
		// Lower bound: the link cannot be beaten. Upper bound: generous,
		// against a loaded machine; a round trip per piece would take 32
		// round trips per connection for the long link.
		if el < ideal-time.Millisecond || el > 3*ideal+time.Second {
			t.Errorf("%v, %d connections: %d bytes each in %v; want about %v", tt.link, tt.conns, n, el, ideal)
		}
		if st := p.Stats(); st.Down != int64(tt.conns*n) {
			t.Errorf("%v: %d bytes down; want %d", tt.link, st.Down, tt.conns*n)
		}
		p.Close()
	}
}

// TestClose: Close ends connections with data in flight, returns, and
// leaves no goroutine behind; it is idempotent, and the port refuses
// afterwards. A target that refuses ends the client's connection.
func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	chunk := random(1, 1<<16)
	target := server(t, func(c net.Conn) {
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	p, err := Listen(target, Link{RTT: 50 * time.Millisecond, BitsPerSecond: 100e6})
	if err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		if _, err := io.ReadFull(c, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		p.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && !isClosed(err) {
			t.Errorf("client %d after Close: %v", i, err)
		}
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Error("the proxy's port accepts after Close")
	}

	// A target that refuses: the client's connection ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	q := listen(t, refused, Link{RTT: time.Millisecond})
	c, err := net.Dial("tcp", q.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || (err != io.EOF && !isClosed(err)) {
		t.Errorf("read through a proxy whose target refuses: %d, %v; want EOF", n, err)
	}
	c.Close()
	q.Close()

	for _, c := range clients {
		c.Close()
	}
	// The test's own servers end with its cleanup; allow for them.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+4 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// isClosed reports whether err is what a reader gets from a connection
// its peer closed or reset.
func isClosed(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed)
}

// BenchmarkThroughput measures what the proxy carries without a cap: 16
// connections at once, each reading 16 MiB through a 1 ms link.
func BenchmarkThroughput(b *testing.B) {
	const conns, n = 16, 16 << 20
	chunk := random(3, 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for range n / len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	p, err := Listen(ln.Addr().String(), Link{RTT: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.SetBytes(conns * n)
	for b.Loop() {
		var wg sync.WaitGroup
		for range conns {
			wg.Go(func() {
				c, err := net.Dial("tcp", p.Addr())
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				io.Copy(io.Discard, c)
			})
		}
		wg.Wait()
	}
}
