// Package netshape is a TCP proxy on loopback that makes the path through
// it look like a far network link: each direction delays what it carries
// by half the round trip and caps its bandwidth, the cap shared by every
// connection through the proxy, as one link's would be. damacy bench
// --link puts one between the loader and an object store, so that
// throughput can be measured against round-trip time on one host.
//
// The model is a store-and-forward link per direction. A piece of data
// read from one side is queued behind what the link is still sending;
// its last byte leaves the link at sent = max(now, link free) +
// bytes/rate, and it is written to the other side at sent + RTT/2. So a
// link of rate R and delay D holds R·D bytes in flight, as a real one
// does, rather than sending and then waiting. The sender side is read
// only while the link's queue is shorter than MaxQueue, so a fast server
// is slowed by TCP's own flow control, not by an unbounded buffer here.
//
// What it does not model: TCP's congestion window (slow start on a new or
// idle connection, loss recovery) and the round trip of a TCP handshake
// (a connection is accepted at once; its first bytes pay the delay);
// loss, reordering and jitter. Each connection carries at most Window
// bytes per direction in flight, as a TCP receive window would bound it.
package netshape

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Link is the shape of the path through a Proxy.
type Link struct {
	// RTT is the round trip added: half of it each way.
	RTT time.Duration
	// BitsPerSecond is each direction's capacity, shared by all the
	// proxy's connections; 0 means no cap.
	BitsPerSecond float64
}

// Bounds of the model (see the package doc).
const (
	// MaxQueue is how far a link's queue may run ahead of its sending: a
	// connection reads more from its sender only while what the link
	// has taken would all be sent within this time.
	MaxQueue = time.Millisecond
	// Window bounds the bytes one connection has in flight per direction.
	Window = 16 << 20
	// readSize is the most read from a sender at once.
	readSize = 64 << 10
)

// ParseLink parses "RTT" or "RTT,RATE": a Go duration ("10ms") and a
// rate in bits per second with a decimal unit: "10Gbit", "2.5Gbit/s",
// "800Mbit", "100kbit", "1e9bit".
func ParseLink(s string) (Link, error) {
	rtt, rate, _ := strings.Cut(strings.TrimSpace(s), ",")
	var l Link
	d, err := time.ParseDuration(strings.TrimSpace(rtt))
	if err != nil || d < 0 {
		return Link{}, fmt.Errorf("link %q: the round trip must be a duration such as 10ms", s)
	}
	l.RTT = d
	if rate = strings.TrimSpace(rate); rate != "" {
		bits, err := parseRate(rate)
		if err != nil {
			return Link{}, fmt.Errorf("link %q: %w", s, err)
		}
		l.BitsPerSecond = bits
	}
	return l, nil
}

func parseRate(s string) (float64, error) {
	t := strings.TrimSuffix(s, "/s")
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"Gbit", 1e9}, {"Mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) {
			break
		}
		return v * u.mult, nil
	}
	return 0, fmt.Errorf("rate %q: want a positive number of bits per second with a unit: Gbit, Mbit, kbit or bit (10Gbit, 800Mbit)", s)
}

// String writes the link as ParseLink reads it, in words.
func (l Link) String() string {
	s := l.RTT.String() + " RTT"
	if l.BitsPerSecond > 0 {
		s += ", " + FormatRate(l.BitsPerSecond) + " each way"
	}
	return s
}

// FormatRate writes bits per second with a decimal unit.
func FormatRate(bits float64) string {
	switch {
	case bits >= 1e9:
		return strconv.FormatFloat(bits/1e9, 'g', 4, 64) + " Gbit/s"
	case bits >= 1e6:
		return strconv.FormatFloat(bits/1e6, 'g', 4, 64) + " Mbit/s"
	case bits >= 1e3:
		return strconv.FormatFloat(bits/1e3, 'g', 4, 64) + " kbit/s"
	}
	return strconv.FormatFloat(bits, 'g', 4, 64) + " bit/s"
}

// Stats are a Proxy's counters since Listen.
type Stats struct {
	Conns int64 // connections accepted
	Up    int64 // bytes delivered from the clients to the target
	Down  int64 // bytes delivered from the target to the clients
}

// Proxy accepts connections on a loopback port and carries each to its
// target over the shaped link. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	link   Link
	up     *wire // clients to target
	down   *wire // target to clients
	dial   net.Dialer
	done   chan struct{} // closed by Close
	bufs   sync.Pool     // *[]byte of readSize
	conns  atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on 127.0.0.1 (a free port) that carries every
// connection to target (host:port) over link.
func Listen(target string, link Link) (*Proxy, error) {
	if link.RTT < 0 || link.BitsPerSecond < 0 {
		return nil, fmt.Errorf("netshape: link %v: want a round trip and a rate of 0 or more", link)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("netshape: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netshape: %w", err)
	}
	p := &Proxy{
		ln: ln, target: target, link: link,
		up: newWire(link), down: newWire(link),
		done: make(chan struct{}), open: map[net.Conn]struct{}{},
	}
	p.bufs.New = func() any { b := make([]byte, readSize); return &b }
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Link is the shape the proxy gives its connections.
func (p *Proxy) Link() Link { return p.link }

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), Up: p.up.bytes.Load(), Down: p.down.bytes.Load()}
}

// Close stops accepting, closes every connection (what is still in the
// link is dropped) and waits for the proxy's goroutines to end. It is
// idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// track registers c to be closed by Close; false when the proxy is
// closed already (c is then closed).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.conns.Add(1)
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve connects a client to the target and carries both directions
// until both have ended.
func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	server, err := p.dial.Dial("tcp", p.target)
	if err != nil {
		return // the client sees its connection closed, as if refused
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.carry(server, client, p.up) })
	p.carry(client, server, p.down)
	wg.Wait()
}

// packet is n bytes of buf in the link, due at the other side at due; or,
// with end set, the end of the sender's data (err says how it ended).
type packet struct {
	buf *[]byte
	n   int
	due time.Time
	end bool
	err error
}

// carry moves src's bytes to dst over w: a reader paces src by the link,
// a writer delivers each packet at its due time. When src ends, dst's
// write side is closed after the last packet (half-close); a failure
// closes both connections.
func (p *Proxy) carry(dst, src net.Conn, w *wire) {
	q := make(chan packet, Window/readSize*4)
	var inFlight atomic.Int64
	room := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { p.deliver(dst, src, q, w, &inFlight, room) })
	defer wg.Wait()
	defer close(q)
	timer := time.NewTimer(0)
	<-timer.C
	for {
		for inFlight.Load() >= Window {
			select {
			case <-room:
			case <-p.done:
				q <- packet{end: true, err: net.ErrClosed}
				return
			}
		}
		buf := p.bufs.Get().(*[]byte)
		n, err := src.Read(*buf)
		if n > 0 {
			sent := w.reserve(time.Now(), n)
			inFlight.Add(int64(n))
			q <- packet{buf: buf, n: n, due: sent.Add(w.delay)}
			// Read on only once the link has sent all but MaxQueue of
			// what it holds: a link busier than that makes the sender
			// wait, as a full queue would.
			if ahead := time.Until(sent) - MaxQueue; ahead > 0 {
				timer.Reset(ahead)
				select {
				case <-timer.C:
				case <-p.done:
					q <- packet{end: true, err: net.ErrClosed}
					return
				}
			}
		} else {
			p.bufs.Put(buf)
		}
		if err != nil {
			// The end travels as data does: it reaches the other side
			// after what was sent before it.
			q <- packet{end: true, err: err, due: w.reserve(time.Now(), 0).Add(w.delay)}
			return
		}
	}
}

// deliver writes each packet of q to dst when it is due. After src's end
// it closes dst's write side (or, when src failed or dst cannot be
// written, both connections) and drains q.
func (p *Proxy) deliver(dst, src net.Conn, q <-chan packet, w *wire, inFlight *atomic.Int64, room chan<- struct{}) {
	timer := time.NewTimer(0)
	<-timer.C
	failed := false
	for pk := range q {
		if !failed {
			if d := time.Until(pk.due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-p.done:
					failed = true
				}
			}
		}
		switch {
		case pk.end && !failed:
			if pk.err == nil || errors.Is(pk.err, io.EOF) {
				closeWrite(dst)
			} else {
				failed = true
			}
		case !pk.end:
			if !failed {
				if _, err := dst.Write((*pk.buf)[:pk.n]); err != nil {
					failed = true
				} else {
					w.bytes.Add(int64(pk.n))
				}
			}
			p.bufs.Put(pk.buf)
			inFlight.Add(-int64(pk.n))
			select {
			case room <- struct{}{}:
			default:
			}
		}
		if failed {
			// Unblock the reader (and the other direction's): a broken
			// side ends the connection.
			dst.Close()
			src.Close()
		}
	}
}

// closeWrite ends c's write side (the peer reads EOF), or closes c when
// it has no write side of its own.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// wire is one direction of the link: its delay, its rate, and when it
// will have sent everything it was given.
type wire struct {
	delay     time.Duration
	nsPerByte float64 // 0: no cap

	mu    sync.Mutex
	free  time.Time
	bytes atomic.Int64 // delivered
}

func newWire(l Link) *wire {
	w := &wire{delay: l.RTT / 2}
	if l.BitsPerSecond > 0 {
		w.nsPerByte = 8e9 / l.BitsPerSecond
	}
	return w
}

// reserve gives the link n bytes at now, behind what it still holds, and
// returns when their last byte is sent (now, without a rate cap).
func (w *wire) reserve(now time.Time, n int) time.Time {
	if w.nsPerByte == 0 {
		return now
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.After(w.free) {
		w.free = now
	}
	w.free = w.free.Add(time.Duration(float64(n) * w.nsPerByte))
	return w.free
}
