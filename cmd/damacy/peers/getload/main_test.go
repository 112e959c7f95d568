package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsage: the refusals, each with its exit status and what it says;
// none sends a request.
func TestUsage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o666); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"scheme": "s3", "bucket": "b", "keys": ["k"], "gets": [[0, 0, 10]]}`)
	t.Setenv("DAMACY_S3_ENDPOINT", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: getload"},
		{[]string{"--gets", good, "extra"}, 2, "usage: getload"},
		{[]string{"--gets", good, "--concurrency", "0"}, 2, "want numbers in 1..4096"},
		{[]string{"--gets", good, "--concurrency", "8,x"}, 2, "want numbers in 1..4096"},
		{[]string{"--gets", filepath.Join(dir, "none.json")}, 1, "no such file"},
		{[]string{"--gets", write("empty.json", `{"keys": [], "gets": []}`)}, 1, "lists no GETs"},
		{[]string{"--gets", write("bad.json", `{"bucket": "b", "keys": ["k"], "gets": [[1, 0, 10]]}`)}, 1, "names no key of 1"},
		{[]string{"--gets", write("http.json", `{"scheme": "http", "keys": ["k"], "gets": [[0, 0, 10]]}`)}, 2, "give --bucket"},
		{[]string{"--gets", good}, 1, "no endpoint"},
		{[]string{"--gets", good, "--rcvlowat", "-1"}, 2, "want 0 or more"},
		{[]string{"--gets", good, "--endpoint", "https://h:9000", "--rcvlowat", "1000"}, 1, "for http:// endpoints only"},
		{[]string{"--serve-raw", "127.0.0.1:0", "--write-size", "-5"}, 2, "want 0 or more"},
		{[]string{"--gets", good, "--endpoint", "ftp://h"}, 1, "want http://host:port"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.code || stdout.Len() != 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("getload %s = %d, stdout %q, stderr %q; want %d, none, %q", strings.Join(tt.args, " "), code, stdout.String(), stderr.String(), tt.code, tt.want)
		}
	}
}

// TestRaw: the raw server's replies are the pattern's bytes at each
// offset, whole, with and without a low-water mark and with the replies
// written in pieces; a run over it reports every byte and its reads.
func TestRaw(t *testing.T) {
	for _, ws := range []int{0, 4096} {
		ctx, cancel := context.WithCancel(context.Background())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- serveRaw(ctx, ln, ws) }()
		want := rawPattern()
		for _, lowat := range []int{0, 64 << 10} {
			var n readCount
			rc := &rawClient{addr: ln.Addr().String(), lowat: lowat, n: &n}
			for i, g := range [][2]int64{{0, 1}, {12345, 300 << 10}, {rawData - 10, 1 << 20}, {3*rawData + 7, 64 << 10}} {
				buf := make([]byte, g[1])
				if err := rc.get(ctx, i%2, g[0], buf); err != nil {
					t.Fatalf("write size %d, mark %d: get %v: %v", ws, lowat, g, err)
				}
				off := g[0] % rawData
				if !bytes.Equal(buf, want[off:off+g[1]]) {
					t.Fatalf("write size %d, mark %d: get %v: wrong bytes", ws, lowat, g)
				}
			}
			if n.reads.Load() == 0 || n.bytes.Load() != 1+300<<10+1<<20+64<<10 {
				t.Errorf("write size %d, mark %d: counted %d reads, %d bytes", ws, lowat, n.reads.Load(), n.bytes.Load())
			}
			rc.close()
		}
		dir := t.TempDir()
		list := filepath.Join(dir, "gets.json")
		if err := os.WriteFile(list, []byte(`{"scheme": "s3", "bucket": "b", "bytes": 3000000, "keys": ["k"], "gets": [[0, 0, 1000000], [0, 5, 1000000], [0, 99, 1000000]]}`), 0o666); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run(ctx, []string{"--gets", list, "--raw", ln.Addr().String(), "--concurrency", "1,2", "--json"}, &stdout, &stderr); code != 0 {
			t.Fatalf("getload --raw = %d: %s", code, stderr.String())
		}
		var res result
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Points {
			if p.Bytes != 3000000 || p.GETs != 3 || p.Reads == 0 || p.ReadBytes <= 0 || !p.Complete {
				t.Errorf("point %+v: want 3 GETs, 3 MB, reads counted", p)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveRaw: %v", err)
		}
	}
}
