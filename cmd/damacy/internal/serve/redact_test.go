package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// secret is the value of the credentials in the test URIs' queries: no
// frame or line may show it.
const secret = "s3cr3t-SIGNATURE"

const presigned = "?X-Amz-Signature=" + secret + "&token=" + secret

// TestLogRedacted: log frames and late lines mask the query values of
// the URLs in their text and attributes.
func TestLogRedacted(t *testing.T) {
	uri := "https://h/x.zarr" + presigned
	var late strings.Builder
	s := &logSink{queue: make(chan logMsg, 4), late: &late}
	s.level.Set(slog.LevelDebug)
	log := slog.New(&frameHandler{sink: s})
	log.Warn("damacy: reading "+uri, "uri", uri, "err", errors.New("GET "+uri+": refused"))
	m := <-s.queue
	if text := fmt.Sprint(m); strings.Contains(text, secret) || !strings.Contains(text, "https://h/x.zarr?X-Amz-Signature=***&token=***") {
		t.Errorf("log frame %+v: want the query's values masked", m)
	}
	s.closed = true
	log.Error("damacy: gave up on "+uri, "uri", uri)
	if strings.Contains(late.String(), secret) {
		t.Errorf("late line %q shows a secret", late.String())
	}
}

// TestErrorRedacted: an error answer masks the query values of the
// sample's URI (a push whose store refuses the connection: serve opens a
// sample's array at push).
func TestErrorRedacted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	uri := "http://" + addr + "/x.zarr" + presigned
	c, _ := startServe(t)
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	e := wantError(t, "push of an unreachable store", c.call("push", map[string]any{"samples": samplesOf(uri, [][][2]int64{{{0, 2}, {0, 2}}})}), statusIO)
	if strings.Contains(e.Message, secret) || !strings.Contains(e.Message, "x.zarr?X-Amz-Signature=***&token=***") || !strings.Contains(e.Message, addr+" refused the connection") {
		t.Errorf("push error %q: want the refused connection and the URI with its query's values masked", e.Message)
	}
}
