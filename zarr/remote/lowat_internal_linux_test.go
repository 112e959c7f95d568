package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// connPair returns a client connection dialed through the default
// client's transport and the server's end of it.
func connPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	tr := newHTTPClient(4).Transport.(*http.Transport)
	client, err = tr.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	client.SetDeadline(time.Now().Add(10 * time.Second))
	return client, server
}

func rcvlowat(t *testing.T, c net.Conn) int {
	t.Helper()
	raw, err := c.(*lowWaterConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	raw.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT) })
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

// TestLowWater: the default client's connections mark their large reads
// (the bytes asked for, at most lowWaterMax) and not their small ones; a
// large read whose bytes never all come ends when the peer closes; a
// connection that carries TLS is never marked.
func TestLowWater(t *testing.T) {
	data := make([]byte, 3<<20)
	rand.Read(data)

	c, s := connPair(t)
	if _, ok := c.(*lowWaterConn); !ok {
		t.Fatalf("the default transport dials %T, not a lowWaterConn", c)
	}
	go func() {
		for p := data; len(p) > 0; p = p[min(len(p), 16<<10):] {
			s.Write(p[:min(len(p), 16<<10)])
		}
	}()
	got := make([]byte, len(data))
	n, err := c.Read(got[:100<<10])
	if err != nil {
		t.Fatal(err)
	}
	if m := rcvlowat(t, c); m != 100<<10 {
		t.Errorf("after a read of 100 KiB: SO_RCVLOWAT %d, want %d", m, 100<<10)
	}
	k, err := c.Read(got[n : n+1<<20])
	if err != nil {
		t.Fatal(err)
	}
	if m := rcvlowat(t, c); m != lowWaterMax {
		t.Errorf("after a read of 1 MiB: SO_RCVLOWAT %d, want %d", m, lowWaterMax)
	}
	if _, err := io.ReadFull(c, got[n+k:len(data)-4096]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got[len(data)-4096:]); err != nil {
		t.Fatal(err)
	}
	if m := rcvlowat(t, c); m != 1 {
		t.Errorf("after a read of 4 KiB: SO_RCVLOWAT %d, want 1", m)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes read differ from the bytes written")
	}

	// Fewer bytes than a read asks for, then the end: the read ends.
	c2, s2 := connPair(t)
	go func() {
		s2.Write(data[:100<<10])
		s2.Close()
	}()
	n, err = io.ReadFull(c2, got[:1<<20])
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 100<<10 || !bytes.Equal(got[:n], data[:n]) {
		t.Errorf("a 1 MiB read of a peer that sent 100 KiB and closed: %d bytes, %v; want 100 KiB, unexpected EOF", n, err)
	}

	// A TLS client's first bytes: no marks after them.
	c3, s3 := connPair(t)
	go io.Copy(io.Discard, s3)
	if _, err := c3.Write([]byte{tlsHandshake, 3, 1, 0, 4, 1, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	go s3.Write(data[:1<<20])
	if _, err := io.ReadFull(c3, got[:1<<20]); err != nil {
		t.Fatal(err)
	}
	if m := rcvlowat(t, c3); m != 1 {
		t.Errorf("a TLS connection's large read: SO_RCVLOWAT %d, want 1", m)
	}
}

// TestLowWaterHTTP: through the default client's transport, over http://
// and https://, small and large bodies, written in small pieces, come
// whole and in time.
func TestLowWaterHTTP(t *testing.T) {
	data := make([]byte, 2<<20+123)
	rand.Read(data)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := data
		if r.URL.Path == "/small" {
			body = data[:10]
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		for p := body; len(p) > 0; p = p[min(len(p), 8<<10):] {
			w.Write(p[:min(len(p), 8<<10)])
			w.(http.Flusher).Flush()
		}
	})
	for _, tls := range []bool{false, true} {
		var srv *httptest.Server
		if tls {
			srv = httptest.NewTLSServer(handler)
		} else {
			srv = httptest.NewServer(handler)
		}
		client := newHTTPClient(4)
		if tls {
			client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
		}
		client.Timeout = 10 * time.Second
		for range 3 {
			for _, path := range []string{"/small", "/large"} {
				resp, err := client.Get(srv.URL + path)
				if err != nil {
					t.Fatalf("tls %v: GET %s: %v", tls, path, err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := data
				if path == "/small" {
					want = data[:10]
				}
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("tls %v: GET %s: %d bytes, %v; want %d bytes", tls, path, len(got), err, len(want))
				}
			}
		}
		client.CloseIdleConnections()
		srv.Close()
	}
}
