package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// testObjects writes a few objects below a temporary directory: "d/a" of
// 100 KiB of random bytes, "d/small" of 10 bytes, "d/empty", "d/x y" (a
// key that needs escaping).
func testObjects(t *testing.T) (dir string, data map[string][]byte) {
	t.Helper()
	dir = t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	data = map[string][]byte{"d/a": make([]byte, 100<<10), "d/small": []byte("0123456789"), "d/empty": {}, "d/x y": []byte("spaced")}
	for i := range data["d/a"] {
		data["d/a"][i] = byte(rng.Uint32())
	}
	for k, v := range data {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, v, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return dir, data
}

// fastOptions retry quickly, so fault tests take milliseconds.
func fastOptions() remote.Options {
	return remote.Options{Attempts: 4, Backoff: time.Millisecond, Timeout: 5 * time.Second}
}

// openStore opens uri with opts and closes the opener at the end,
// checking that no goroutine is left behind.
func openStore(t *testing.T, opts remote.Options, uri string) (*remote.Store, string, *remote.Opener) {
	t.Helper()
	o, err := remote.NewOpener(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	st, path, err := o.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	rs, ok := st.(*remote.Store)
	if !ok {
		t.Fatalf("Open(%s) = %T, want *remote.Store", uri, st)
	}
	return rs, path, o
}

// checkGoroutines fails when goroutines started since before are still
// running a moment later (idle connections take a moment to wind down).
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leakCheck registers a goroutine check to run after every other cleanup
// of the test (servers closed, openers closed).
func leakCheck(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() { checkGoroutines(t, before) })
}

func TestHTTPReads(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "https"
		}
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			dir, data := testObjects(t)
			srv := remotetest.NewFaultServer(t, dir, tls)
			opts := fastOptions()
			if tls {
				opts.HTTPClient = srv.Client()
			}
			st, path, _ := openStore(t, opts, srv.URL+"/d")
			if path != "d" {
				t.Fatalf("path %q, want d", path)
			}
			checkReads(t, st, "", data)
		})
	}
}

// checkReads exercises a store holding testObjects' data below prefix.
func checkReads(t *testing.T, st *remote.Store, prefix string, data map[string][]byte) {
	t.Helper()
	a := data["d/a"]
	for k, v := range data {
		n, err := st.Size(prefix + k)
		if err != nil || n != int64(len(v)) {
			t.Errorf("Size(%s) = %d, %v; want %d", k, n, err, len(v))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		off := rng.Int64N(int64(len(a)))
		p := make([]byte, rng.Int64N(int64(len(a))-off)+1)
		n, err := st.ReadAt(prefix+"d/a", p, off)
		if err != nil || n != len(p) || !bytes.Equal(p, a[off:off+int64(n)]) {
			t.Fatalf("ReadAt(d/a, %d bytes, %d) = %d, %v (equal %v)", len(p), off, n, err, bytes.Equal(p[:n], a[off:off+int64(n)]))
		}
	}
	// Past the end: what is there, then io.EOF.
	p := make([]byte, 20)
	if n, err := st.ReadAt(prefix+"d/small", p, 5); n != 5 || err != io.EOF || string(p[:5]) != "56789" {
		t.Errorf("ReadAt(d/small, 20, 5) = %d, %v, %q; want 5, EOF, 56789", n, err, p[:n])
	}
	if n, err := st.ReadAt(prefix+"d/small", p, 10); n != 0 || err != io.EOF {
		t.Errorf("ReadAt(d/small, 20, 10) = %d, %v; want 0, EOF", n, err)
	}
	if n, err := st.ReadAt(prefix+"d/x y", p[:6], 0); n != 6 || err != nil || string(p[:6]) != "spaced" {
		t.Errorf("ReadAt(d/x y) = %d, %v, %q", n, err, p[:n])
	}
	// Absent objects.
	if _, err := st.ReadAt(prefix+"d/missing", p, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAt(d/missing) = %v, want fs.ErrNotExist", err)
	}
	if _, err := st.Size(prefix + "d/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Size(d/missing) = %v, want fs.ErrNotExist", err)
	}
	if _, err := st.ReadTail(prefix+"d/missing", p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadTail(d/missing) = %v, want fs.ErrNotExist", err)
	}
	// Whole objects.
	if b, err := st.ReadObject(prefix+"d/a", 1<<20); err != nil || !bytes.Equal(b, a) {
		t.Errorf("ReadObject(d/a) = %d bytes, %v", len(b), err)
	}
	if b, err := st.ReadObject(prefix+"d/small", math.MaxInt64); err != nil || !bytes.Equal(b, data["d/small"]) {
		t.Errorf("ReadObject(d/small, no limit) = %q, %v", b, err)
	}
	if b, err := st.ReadObject(prefix+"d/empty", 10); err != nil || len(b) != 0 {
		t.Errorf("ReadObject(d/empty) = %d bytes, %v", len(b), err)
	}
	if _, err := st.ReadObject(prefix+"d/a", 1000); !errors.Is(err, zarr.ErrTooLarge) {
		t.Errorf("ReadObject(d/a, limit 1000) = %v, want zarr.ErrTooLarge", err)
	}
	if _, err := st.ReadObject(prefix+"d/missing", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadObject(d/missing) = %v, want fs.ErrNotExist", err)
	}
	// Tails.
	tail := make([]byte, 1000)
	if n, err := st.ReadTail(prefix+"d/a", tail); err != nil || n != int64(len(a)) || !bytes.Equal(tail, a[len(a)-1000:]) {
		t.Errorf("ReadTail(d/a, 1000) = %d, %v", n, err)
	}
	if n, err := st.ReadTail(prefix+"d/small", tail); err != nil || n != 10 {
		t.Errorf("ReadTail(d/small, 1000) = %d, %v; want 10, nil (shorter than the tail)", n, err)
	}
	if n, err := st.ReadTail(prefix+"d/small", tail[:4]); err != nil || n != 10 || string(tail[:4]) != "6789" {
		t.Errorf("ReadTail(d/small, 4) = %d, %v, %q", n, err, tail[:4])
	}
	if n, err := st.ReadTail(prefix+"d/empty", tail[:4]); err != nil || n != 0 {
		t.Errorf("ReadTail(d/empty, 4) = %d, %v; want 0, nil", n, err)
	}
	// Ranges with gaps, in one request.
	rs := []remote.Range{{Off: 10, Buf: make([]byte, 100)}, {Off: 500, Buf: make([]byte, 0)}, {Off: 5000, Buf: make([]byte, 3000)}, {Off: 8000, Buf: make([]byte, 1)}}
	if err := st.ReadRanges(context.Background(), prefix+"d/a", rs); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !bytes.Equal(r.Buf, a[r.Off:r.Off+int64(len(r.Buf))]) {
			t.Errorf("ReadRanges: range at %d differs", r.Off)
		}
	}
	err := st.ReadRanges(context.Background(), prefix+"d/small", []remote.Range{{Off: 2, Buf: make([]byte, 3)}, {Off: 8, Buf: make([]byte, 5)}})
	var re *remote.Error
	if !errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &re) {
		t.Errorf("ReadRanges past the end = %v, want io.ErrUnexpectedEOF, not an *Error", err)
	}
}

func TestStoreImplementsZarr(t *testing.T) {
	var _ zarr.Store = (*remote.Store)(nil)
	var _ zarr.TailReader = (*remote.Store)(nil)
	var _ zarr.ObjectReader = (*remote.Store)(nil)
}

func TestOpenURIs(t *testing.T) {
	dir := t.TempDir()
	o, err := remote.NewOpener(remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ctx := context.Background()
	tests := []struct {
		uri  string
		path string
		err  string
	}{
		{dir, "", ""},
		{"file://" + dir, "", ""},
		{"http://127.0.0.1:1/a/b.zarr/", "a/b.zarr", ""},
		{"https://example.invalid/x.zarr?sig=abc", "x.zarr", ""},
		{"http://127.0.0.1:1/", "", ""},
		{filepath.Join(dir, "missing"), "", "not found"},
		{"ftp://host/x", "", "unsupported scheme"},
		{"s3:///x", "", "no bucket"},
		{"http://127.0.0.1:1/a/../b", "", "invalid key"},
		{"file://otherhost/x", "", "local path"},
	}
	for _, tt := range tests {
		st, path, err := o.Open(ctx, tt.uri)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Open(%q) = %v; want an error with %q", tt.uri, err, tt.err)
		case tt.err == "" && (err != nil || path != tt.path || st == nil):
			t.Errorf("Open(%q) = %T, %q, %v; want path %q", tt.uri, st, path, err, tt.path)
		}
		if tt.err != "" {
			zarrtest.CheckMessage(t, fmt.Sprintf("Open(%q)", tt.uri), err, tt.uri)
		}
	}
	// A store names its server, without credentials or query.
	for uri, want := range map[string]string{
		"https://user:pw@example.invalid:8443/x.zarr?sig=abc": "https://example.invalid:8443",
		"http://127.0.0.1:1/a":                                "http://127.0.0.1:1",
	} {
		st, _, err := o.Open(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.(*remote.Store).Endpoint(); got != want {
			t.Errorf("Endpoint of %s = %q, want %q", uri, got, want)
		}
	}
	if _, _, err := o.Open(ctx, filepath.Join(dir, "missing")); !errors.Is(err, zarr.ErrNotFound) {
		t.Errorf("a missing directory: %v, want zarr.ErrNotFound", err)
	}
	if !remote.IsURI("s3://b/k") || remote.IsURI("/data/x") || remote.IsURI("rel/x:y") {
		t.Error("IsURI")
	}
}

// TestFaults injects each fault on the first requests for an object and
// checks that reads return the right bytes after the retries, or the right
// error without retrying, and how many requests it took.
func TestFaults(t *testing.T) {
	type check func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte)
	readA := func(t *testing.T, st *remote.Store, data map[string][]byte) {
		t.Helper()
		a := data["d/a"]
		p := make([]byte, 50000)
		n, err := st.ReadAt("d/a", p, 1234)
		if err != nil || n != len(p) || !bytes.Equal(p, a[1234:1234+len(p)]) {
			t.Fatalf("ReadAt = %d, %v (right bytes: %v)", n, err, bytes.Equal(p[:n], a[1234:1234+n]))
		}
	}
	retried := func(kind remotetest.FaultKind, times int) check {
		return func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: kind, Path: "/d/a", Times: times})
			readA(t, st, data)
			if n := srv.Count("/d/a"); n != times+1 {
				t.Errorf("%d requests, want %d (%v)", n, times+1, srv.Requests())
			}
		}
	}
	resumed := func(kind remotetest.FaultKind) check {
		return func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: kind, Path: "/d/a", Times: 1})
			readA(t, st, data)
			reqs := srv.Requests()
			if len(reqs) != 2 || reqs[0] != "GET /d/a bytes=1234-51233" || !strings.HasPrefix(reqs[1], "GET /d/a bytes=") || strings.HasPrefix(reqs[1], "GET /d/a bytes=1234-") {
				t.Errorf("requests %q: want the retry to ask only for the bytes still missing", reqs)
			}
		}
	}
	tests := []struct {
		name string
		run  check
	}{
		{"500 then success", retried(remotetest.Status500, 2)},
		{"503 then success", retried(remotetest.Status503, 3)},
		{"SlowDown then success", retried(remotetest.SlowDown, 3)},
		{"429 then success", retried(remotetest.TooMany, 1)},
		{"reset mid-body", resumed(remotetest.Reset)},
		{"truncated body", resumed(remotetest.Truncate)},
		{"reset twice on ranges with gaps", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: remotetest.Reset, Path: "/d/a", Times: 2})
			a := data["d/a"]
			rs := []remote.Range{{Off: 100, Buf: make([]byte, 20000)}, {Off: 60000, Buf: make([]byte, 30000)}}
			if err := st.ReadRanges(context.Background(), "d/a", rs); err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if !bytes.Equal(r.Buf, a[r.Off:r.Off+int64(len(r.Buf))]) {
					t.Fatalf("range at %d differs", r.Off)
				}
			}
			if n := srv.Count("/d/a"); n != 3 {
				t.Errorf("%d requests, want 3: %q", n, srv.Requests())
			}
		}},
		{"persistent 503 gives up", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: remotetest.Status503, Path: "/d/a"})
			_, err := st.ReadAt("d/a", make([]byte, 10), 0)
			var re *remote.Error
			if !errors.As(err, &re) || re.Status != 503 || re.Attempts != 4 || !strings.Contains(err.Error(), "/d/a") {
				t.Fatalf("err = %v, want a 503 *Error after 4 attempts naming the object", err)
			}
			zarrtest.CheckMessage(t, "ReadAt", err, srv.URL+"/d/a")
			if n := srv.Count("/d/a"); n != 4 {
				t.Errorf("%d requests, want 4", n)
			}
		}},
		{"200 instead of 206", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: remotetest.IgnoreRange, Path: "/d/"})
			readA(t, st, data)
			a := data["d/a"]
			tail := make([]byte, 100)
			if n, err := st.ReadTail("d/a", tail); err != nil || n != int64(len(a)) || !bytes.Equal(tail, a[len(a)-100:]) {
				t.Fatalf("ReadTail = %d, %v", n, err)
			}
			p := make([]byte, 20)
			if n, err := st.ReadAt("d/small", p, 5); n != 5 || err != io.EOF || string(p[:5]) != "56789" {
				t.Errorf("ReadAt(d/small, 20, 5) = %d, %v, %q", n, err, p[:n])
			}
			if n, err := st.ReadTail("d/small", p[:4]); err != nil || n != 10 || string(p[:4]) != "6789" {
				t.Errorf("ReadTail(d/small, 4) = %d, %v, %q", n, err, p[:4])
			}
		}},
		{"suffix range refused", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: remotetest.RefuseSuffix, Path: "/d/a"})
			a := data["d/a"]
			tail := make([]byte, 100)
			for range 2 {
				if n, err := st.ReadTail("d/a", tail); err != nil || n != int64(len(a)) || !bytes.Equal(tail, a[len(a)-100:]) {
					t.Fatalf("ReadTail = %d, %v", n, err)
				}
			}
			// Refused once (416), then HEAD + range each time.
			if reqs := srv.Requests(); len(reqs) != 5 || !strings.HasPrefix(reqs[0], "GET /d/a bytes=-100") || reqs[1] != "HEAD /d/a" || reqs[3] != "HEAD /d/a" {
				t.Errorf("requests %q", reqs)
			}
		}},
		{"403 is not retried", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: remotetest.Forbidden, Path: "/d/a"})
			for _, read := range []func() error{
				func() error { _, err := st.ReadAt("d/a", make([]byte, 10), 0); return err },
				func() error { _, err := st.Size("d/a"); return err },
				func() error { _, err := st.ReadTail("d/a", make([]byte, 10)); return err },
			} {
				err := read()
				var re *remote.Error
				if !errors.Is(err, fs.ErrPermission) || !errors.As(err, &re) || re.Status != 403 || (re.Code != "AccessDenied" && re.Method != "HEAD") || !strings.Contains(err.Error(), srv.URL+"/d/a") {
					t.Errorf("err = %v, want a 403 *Error naming the URI, matching fs.ErrPermission", err)
				}
				zarrtest.CheckMessage(t, "a read of a forbidden object", err, srv.URL+"/d/a")
			}
			if n := srv.Count("/d/a"); n != 3 {
				t.Errorf("%d requests for 3 reads, want 3 (no retries): %q", n, srv.Requests())
			}
		}},
		{"404 is absent, not retried", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			if _, err := st.ReadAt("d/nothing", make([]byte, 10), 0); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("err = %v, want fs.ErrNotExist", err)
			}
			if n := srv.Count("/d/nothing"); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		}},
		{"HEAD refused", func(t *testing.T, st *remote.Store, srv *remotetest.FaultServer, data map[string][]byte) {
			srv.Inject(remotetest.Fault{Kind: remotetest.Forbidden, Path: "/d/a", Method: "HEAD"})
			if _, err := st.Size("d/a"); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("err = %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leakCheck(t)
			dir, data := testObjects(t)
			srv := remotetest.NewFaultServer(t, dir, false)
			st, _, _ := openStore(t, fastOptions(), srv.URL)
			tt.run(t, st, srv, data)
		})
	}
}

// TestDeadline: a server slower than the per-attempt deadline fails every
// attempt, and the read returns an error soon, not hanging.
func TestDeadline(t *testing.T) {
	leakCheck(t)
	dir, _ := testObjects(t)
	srv := remotetest.NewFaultServer(t, dir, false)
	srv.Inject(remotetest.Fault{Kind: remotetest.Stall, Path: "/d/a"})
	opts := remote.Options{Attempts: 2, Backoff: time.Millisecond, Timeout: 150 * time.Millisecond}
	st, _, _ := openStore(t, opts, srv.URL)
	t0 := time.Now()
	_, err := st.ReadAt("d/a", make([]byte, 10), 0)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	var re *remote.Error
	if !errors.As(err, &re) || re.Attempts != 2 || !strings.Contains(err.Error(), "sent no response within the response timeout of 150ms") {
		t.Fatalf("err = %v, want a response timeout *Error after 2 attempts", err)
	}
	zarrtest.CheckMessage(t, "ReadAt", err, srv.URL+"/d/a")
	// A caller's context ending is final: no retry.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	before := srv.Count("/d/a")
	err = st.ReadRanges(ctx, "d/a", []remote.Range{{Off: 0, Buf: make([]byte, 10)}})
	if !errors.Is(err, context.DeadlineExceeded) || srv.Count("/d/a") != before+1 {
		t.Errorf("err = %v after %d requests, want context.DeadlineExceeded after 1", err, srv.Count("/d/a")-before)
	}
}

// TestCloseAborts: Close ends the calls waiting on a stalled server.
func TestCloseAborts(t *testing.T) {
	leakCheck(t)
	dir, _ := testObjects(t)
	srv := remotetest.NewFaultServer(t, dir, false)
	srv.Inject(remotetest.Fault{Kind: remotetest.Stall, Path: "/d/a"})
	st, _, o := openStore(t, remote.Options{}, srv.URL)
	done := make(chan error)
	go func() {
		_, err := st.ReadAt("d/a", make([]byte, 10), 0)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	o.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not abort the read")
	}
	_, err := st.Size("d/a")
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("after Close: %v", err)
	}
	zarrtest.CheckMessage(t, "Size after Close", err, srv.URL+"/d/a")
}

// TestConcurrencyBound: Options.Concurrency bounds the requests in flight.
func TestConcurrencyBound(t *testing.T) {
	leakCheck(t)
	dir, data := testObjects(t)
	srv := remotetest.NewFaultServer(t, dir, false)
	opts := fastOptions()
	opts.Concurrency = 3
	st, _, o := openStore(t, opts, srv.URL)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			p := make([]byte, 1000)
			if _, err := st.ReadAt("d/a", p, int64(i)*1000); err != nil || !bytes.Equal(p, data["d/a"][i*1000:i*1000+1000]) {
				t.Errorf("read %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if m := srv.MaxInFlight(); m > 3 {
		t.Errorf("%d requests in flight, want at most 3", m)
	}
	if s := o.Stats(); s.Requests != 40 || s.Retries != 0 {
		t.Errorf("stats %+v, want 40 requests, no retries", s)
	}
}
