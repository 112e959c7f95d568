package remotetest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FaultKind is a misbehaviour the FaultServer can inject.
type FaultKind int

// The faults.
const (
	Status500    FaultKind = iota + 1 // 500 Internal Server Error
	Status503                         // 503 Service Unavailable
	SlowDown                          // 503 with S3's SlowDown error document
	TooMany                           // 429 Too Many Requests
	Forbidden                         // 403 with an AccessDenied document
	Reset                             // half the body, then a TCP reset
	Truncate                          // a Content-Length larger than the body sent
	IgnoreRange                       // 200 and the whole object, whatever the Range
	RefuseSuffix                      // 416 for suffix ranges (bytes=-N); others served
	Stall                             // no answer until the client gives up
)

func (k FaultKind) String() string {
	names := [...]string{"", "500", "503", "SlowDown", "429", "403", "reset", "truncate", "ignore-range", "refuse-suffix", "stall"}
	if int(k) < len(names) {
		return names[k]
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Fault is a rule: requests whose path contains Path (and whose method
// is Method, when set) get Kind, the next Times of them (0: all).
type Fault struct {
	Kind   FaultKind
	Path   string
	Method string
	Times  int
}

// FaultServer serves the files below a directory over HTTP or HTTPS (Go's
// file server: HEAD, and GET with Range, suffix ranges included), and
// injects faults into the requests that match its rules. It counts the
// requests it receives.
type FaultServer struct {
	*httptest.Server
	files http.Handler

	mu       sync.Mutex
	faults   []*Fault
	requests []string // "METHOD /path range"
	inFlight int
	maxIn    int
}

// NewFaultServer serves dir, over TLS when tls is set, until the test
// ends. Its Client trusts its certificate.
func NewFaultServer(t testing.TB, dir string, tls bool) *FaultServer {
	s := &FaultServer{files: http.FileServer(http.Dir(dir))}
	if tls {
		s.Server = httptest.NewTLSServer(s)
	} else {
		s.Server = httptest.NewServer(s)
	}
	t.Cleanup(s.Close)
	return s
}

// Inject adds a rule; rules are tried in the order added.
func (s *FaultServer) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// Clear removes every rule.
func (s *FaultServer) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Requests returns the requests received so far, each as "METHOD /path
// range".
func (s *FaultServer) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// MaxInFlight returns the most requests the server was handling at once.
func (s *FaultServer) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

// Count returns how many requests had a path ending with suffix.
func (s *FaultServer) Count(suffix string) int {
	n := 0
	for _, r := range s.Requests() {
		if _, p, _ := strings.Cut(r, " "); strings.HasSuffix(strings.Fields(p)[0], suffix) {
			n++
		}
	}
	return n
}

func (s *FaultServer) pick(r *http.Request) FaultKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+r.Header.Get("Range")))
	for _, f := range s.faults {
		if !strings.Contains(r.URL.Path, f.Path) || (f.Method != "" && f.Method != r.Method) {
			continue
		}
		if f.Times < 0 {
			continue // spent
		}
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				f.Times = -1
			}
		}
		return f.Kind
	}
	return 0
}

func (s *FaultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := s.pick(r)
	s.mu.Lock()
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	switch kind {
	case 0:
		s.files.ServeHTTP(w, r)
	case Status500, Status503, SlowDown, TooMany, Forbidden:
		status, code := map[FaultKind]int{Status500: 500, Status503: 503, SlowDown: 503, TooMany: 429, Forbidden: 403}[kind], ""
		switch kind {
		case SlowDown:
			code = "SlowDown"
		case Forbidden:
			code = "AccessDenied"
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, "<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>injected %s</Message></Error>", code, kind)
		}
	case IgnoreRange:
		r.Header.Del("Range")
		s.files.ServeHTTP(w, r)
	case RefuseSuffix:
		if strings.HasPrefix(r.Header.Get("Range"), "bytes=-") {
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		s.files.ServeHTTP(w, r)
	case Stall:
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	case Reset, Truncate:
		rec := httptest.NewRecorder()
		s.files.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if kind == Truncate {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(rec.Code)
			w.Write(body[:len(body)/2]) // the server closes the connection: the body ends short
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		writeHead(buf, rec, len(body))
		buf.Write(body[:len(body)/2])
		buf.Flush()
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with a RST
		} else if tc, ok := netConn(conn); ok {
			tc.SetLinger(0)
		}
		conn.Close()
	}
}

func writeHead(w *bufio.ReadWriter, rec *httptest.ResponseRecorder, n int) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\n", rec.Code, http.StatusText(rec.Code))
	for k, vs := range rec.Header() {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			fmt.Fprintf(w, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", n)
}

// netConn finds the TCP connection under a TLS one.
func netConn(c net.Conn) (*net.TCPConn, bool) {
	type netConner interface{ NetConn() net.Conn }
	if nc, ok := c.(netConner); ok {
		tc, ok := nc.NetConn().(*net.TCPConn)
		return tc, ok
	}
	return nil, false
}
