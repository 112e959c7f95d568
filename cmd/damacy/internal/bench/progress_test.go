package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := startProgress(Env{Stderr: &buf, Progress: true}, "generating", "B", 4000)
	p.add(1000)
	time.Sleep(3 * progressInterval)
	p.finish()
	out := buf.String()
	if !strings.Contains(out, "damacy: generating 1.0 kB of 4.0 kB (25%)") || !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("status lines %q: want a 25%% line, cleared at the end", out)
	}
}

func TestProgressQuiet(t *testing.T) {
	var buf bytes.Buffer
	p := startProgress(Env{Stderr: &buf}, "streaming", "batches", 10)
	p.add(10)
	time.Sleep(2 * progressInterval)
	if p.finish() <= 0 || buf.Len() != 0 {
		t.Errorf("progress off a terminal wrote %q", buf.String())
	}
	var nilp *progress
	nilp.add(1)
	if nilp.finish() != 0 {
		t.Errorf("a nil progress measured time")
	}
}
