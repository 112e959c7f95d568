package main

import (
	"bytes"
	"context"
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
		{[]string{"--gets", good, "--endpoint", "ftp://h"}, 1, "want http://host:port"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.code || stdout.Len() != 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("getload %s = %d, stdout %q, stderr %q; want %d, none, %q", strings.Join(tt.args, " "), code, stdout.String(), stderr.String(), tt.code, tt.want)
		}
	}
}
