package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve"}, exitUsage, "want one of --fd and --socket"},
		{[]string{"serve", "--fd", "3", "--socket", "x"}, exitUsage, "want one of --fd and --socket"},
		{[]string{"serve", "--fd", "3", "extra"}, exitUsage, "takes no arguments"},
		{[]string{"serve", "--fd", "x"}, exitUsage, "invalid value"},
		{[]string{"serve", "--fd", "987"}, exitError, "--fd 987"},
		{[]string{"serve", "--fd", "3", "--parent-pid", "-1"}, exitUsage, "--parent-pid -1"},
	} {
		code, out, errs := runCmd(t, tt.args...)
		if code != tt.code || out != "" || !strings.Contains(errs, tt.want) {
			t.Errorf("damacy %s = exit %d, stdout %q, stderr %q; want exit %d, stderr containing %q",
				strings.Join(tt.args, " "), code, out, errs, tt.code, tt.want)
		}
	}
	out, _ := mustRun(t, "help", "serve")
	for _, want := range []string{"--fd", "--socket", "--parent-pid", "PROTOCOL.md", "SIGTERM", "/dev/shm"} {
		if !strings.Contains(out, want) {
			t.Errorf("damacy help serve does not mention %s:\n%s", want, out)
		}
	}
}

// TestServeSocket runs `damacy serve --socket PATH` and says hello and
// close to it: the command reaches package serve and exits 0, with nothing
// on stdout and the socket file removed. The protocol itself is tested in
// package serve.
func TestServeSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	var out, errb bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- run(context.Background(), []string{"serve", "--socket", path}, &out, &errb) }()
	var conn net.Conn
	var err error
	for range 200 {
		if conn, err = net.Dial("unix", path); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	call := func(m map[string]any) map[string]any {
		t.Helper()
		b, _ := json.Marshal(m)
		if _, err := conn.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
			t.Fatal(err)
		}
		for {
			var hdr [4]byte
			if _, err := io.ReadFull(conn, hdr[:]); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(conn, buf); err != nil {
				t.Fatal(err)
			}
			var r map[string]any
			if err := json.Unmarshal(buf, &r); err != nil {
				t.Fatal(err)
			}
			if r["op"] == "log" {
				continue
			}
			if r["ok"] != true {
				t.Fatalf("%v: %v", m, r)
			}
			return r
		}
	}
	cfg := map[string]any{"batch_size": 2, "host_buffer_bytes": 1 << 20, "device_buffer_bytes": 1 << 20, "max_chunk_uncompressed_bytes": 1 << 16}
	if r := call(map[string]any{"id": 0, "op": "hello", "version": 2, "config": cfg, "device": map[string]any{"kind": "cpu"}}); r["engine"] != "host" {
		t.Errorf("hello: %v", r)
	}
	call(map[string]any{"id": 1, "op": "close"})
	if n := <-code; n != exitOK || out.Len() != 0 {
		t.Fatalf("damacy serve --socket: exit %d, stdout %q, stderr %q", n, out.String(), errb.String())
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("the socket file is left behind")
	}
}
