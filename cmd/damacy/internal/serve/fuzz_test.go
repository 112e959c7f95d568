package serve

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/remote"
)

// frame encodes payloads as frames.
func frame(payloads ...[]byte) []byte {
	var out []byte
	for _, p := range payloads {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}

// FuzzReadFrame reads frames from arbitrary bytes: each payload read is
// 1 to maxFrame bytes and the frames read re-encode to a prefix of the
// input; the read stops with io.EOF exactly at the end of the input
// between frames, io.ErrUnexpectedEOF inside one, or a *frameError at a
// header out of range.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame([]byte(`{"id": 0, "op": "hello"}`), []byte(`{"op": "release", "batch": 3}`)))
	f.Add(frame([]byte(`x`))[:3])
	f.Add(frame([]byte(`{"id": 1}`))[:7])
	f.Add([]byte{0, 0, 0, 0})
	f.Add(binary.LittleEndian.AppendUint32(nil, maxFrame+1))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, maxFrame), 'x'))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var got []byte
		for {
			p, err := readFrame(r)
			if err == nil {
				if len(p) == 0 || len(p) > maxFrame {
					t.Fatalf("a payload of %d bytes", len(p))
				}
				got = append(got, frame(p)...)
				continue
			}
			if !bytes.HasPrefix(data, got) {
				t.Fatal("the frames read do not re-encode to a prefix of the input")
			}
			rest := data[len(got):]
			var fe *frameError
			switch {
			case err == io.EOF:
				if len(rest) != 0 {
					t.Fatalf("io.EOF with %d bytes left", len(rest))
				}
			case err == io.ErrUnexpectedEOF:
				if len(rest) == 0 || len(rest) >= 4 && int(binary.LittleEndian.Uint32(rest)) <= len(rest)-4 {
					t.Fatalf("io.ErrUnexpectedEOF with %d bytes left, a whole frame or none", len(rest))
				}
			case errors.As(err, &fe):
				if n := binary.LittleEndian.Uint32(rest); n != 0 && n <= maxFrame || fe.n != n {
					t.Fatalf("%v at a header of %d", err, n)
				}
			default:
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
	})
}

// fuzzIDs are the ids of the hello and close that FuzzServe sends itself.
const fuzzHelloID, fuzzCloseID = 1 << 50, 1<<50 + 1

// FuzzServe feeds a session arbitrary requests: before, lines of JSON sent
// as frames before a hello of the host engine on a small store, after,
// lines sent after it, then a close. "@store" in a line is the store's
// path. Lines whose op is hello are left out (a fuzzed configuration
// could ask for any memory), and inputs that name a remote URI are
// skipped (no network). The properties: serve does not panic, returns
// within a minute, and answers every request with an integer id once
// (those before the first close the session reads) and every request with
// another id once, with that id, unless it stops with a closing message.
func FuzzServe(f *testing.F) {
	path, _ := testArray(f, f.TempDir())
	box := `[[0, 4], [0, 5], [0, 6]]`
	smp := `{"uri": "@store", "box": ` + box + `}`
	f.Add([]byte(`{"id": 1, "op": "pop"}
{"id": 2, "op": "push", "samples": [`+smp+`]}
{"id": "x", "op": "stats"}`), []byte(`{"id": 3, "op": "push", "samples": [`+smp+`, `+smp+`, `+smp+`, `+smp+`]}
{"id": 4, "op": "pop"}
{"id": 5, "op": "pop"}
{"op": "release", "batch": 0, "done": true}
{"id": 6, "op": "flush"}
{"id": 7, "op": "pop"}
{"id": 8, "op": "pop"}
{"id": 9, "op": "pending"}
{"op": "release", "batch": 1, "event_handle": "00"}
{"id": 10, "op": "stats"}
{"id": 11, "op": "stats_reset"}`))
	f.Add([]byte(`[1, 2]
{"id": -1}
{"id": 1.5, "op": "pop"}
not json`), []byte(`{"id": 1, "op": "set_log_level", "level": 0}
{"id": 2, "op": "push", "samples": [{"uri": "@store/nope", "box": `+box+`}]}
{"id": 3, "op": "push", "samples": [{"uri": "@store", "box": [[0, 4, 1], [0, 5], [0, 6]]}]}
{"id": 4, "op": "release", "batch": 0}
{"op": "release"}
{"op": "pop"}
{"id": 5, "op": "close"}
{"id": 6, "op": "pop"}`))
	f.Add([]byte(``), []byte(`{"id": 1, "op": "push", "samples": [`+smp+`, `+smp+`, `+smp+`, `+smp+`, `+smp+`, `+smp+`, `+smp+`]}
{"id": 2, "op": "pop"}
{"id": 3, "op": "pop"}
{"id": 4, "op": "pop"}
{"op": "release", "batch": 1}
{"id": 5, "op": "pop"}
{"id": 6, "op": "flush"}
{"id": 7, "op": "pop"}
{"id": 8, "op": "frobnicate", "batch": "x"}`))
	f.Fuzz(func(t *testing.T, before, after []byte) {
		var frames [][]byte
		add := func(lines []byte) {
			for line := range bytes.Lines(lines) {
				line = bytes.ReplaceAll(bytes.TrimRight(line, "\n"), []byte("@store"), []byte(path))
				if len(line) == 0 || len(line) > maxFrame {
					continue
				}
				var req request
				if json.Unmarshal(line, &req) == nil {
					if req.Op == "hello" {
						continue
					}
					for _, s := range req.Samples {
						if remote.IsURI(s.URI) && !strings.HasPrefix(strings.ToLower(s.URI), "file://") {
							t.Skip("a remote URI")
						}
					}
				}
				frames = append(frames, line)
			}
		}
		add(before)
		cfg := hostConfig()
		cfg["sample_shape"] = []int{4, 5, 6}
		h, _ := json.Marshal(map[string]any{"id": fuzzHelloID, "op": "hello", "version": protocolVersion, "config": cfg, "device": map[string]any{"kind": "cpu"}})
		frames = append(frames, h)
		add(after)
		frames = append(frames, []byte(`{"id": `+strconv.Itoa(fuzzCloseID)+`, "op": "close"}`))

		// What must be answered: requests up to the first close read.
		want := map[string]int{} // by the id as sent
		for _, b := range frames {
			var head struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(b, &head) != nil || len(head.ID) == 0 || string(head.ID) == "null" {
				continue
			}
			want[canonical(head.ID)]++
			var req request
			if _, err := strconv.ParseUint(string(head.ID), 10, 63); err == nil && json.Unmarshal(b, &req) == nil && req.Op == "close" {
				break
			}
		}

		c, done := startServe(t)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for _, b := range frames {
				if _, err := c.conn.Write(frame(b)); err != nil {
					return // the session ended at a close
				}
			}
		}()
		got := map[string]int{}
		closing := false
		for {
			m, err := c.readAny()
			if err != nil {
				// ECONNRESET: the server closed its end with requests
				// sent after close unread.
				if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("reading the answers: %v", err)
				}
				break
			}
			for _, fd := range m.fds {
				syscall.Close(fd)
			}
			switch {
			case len(m.RawID) > 0:
				got[canonical(m.RawID)]++
			case m.Op == "closing":
				closing = true
			case m.Op != "log":
				t.Fatalf("a frame that is neither an answer, a log nor closing: %+v", m)
			}
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("serve did not return")
		}
		c.conn.Close()
		<-sent
		for id, n := range want {
			if got[id] != n && !(closing && got[id] < n) {
				t.Errorf("id %s: %d answers to %d requests", id, got[id], n)
			}
			delete(got, id)
		}
		for id, n := range got {
			t.Errorf("id %s: %d answers to no request", id, n)
		}
	})
}

// canonical is JSON value b in one spelling (numbers as written), to
// compare an id as sent with the id an answer echoes.
func canonical(b []byte) string {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
