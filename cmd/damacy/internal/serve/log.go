package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/zarr/remote"
)

// The protocol's log levels (TRACE=0 ... FATAL=5) as slog levels.
var protoLevels = [...]slog.Level{slog.LevelDebug - 4, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelError + 4}

// protoLevel is the protocol level of an slog level.
func protoLevel(l slog.Level) int {
	for i := len(protoLevels) - 1; i > 0; i-- {
		if l >= protoLevels[i] {
			return i
		}
	}
	return 0
}

// logMsg is a log frame.
type logMsg struct {
	Op    string         `json:"op"`
	Level int            `json:"level"`
	Msg   string         `json:"msg"`
	Attrs map[string]any `json:"attrs,omitempty"`
}

// logSink queues log frames for the client. Records never wait for the
// client: a sender goroutine writes the queue, and a record that finds the
// queue full (the client is not reading) is dropped and counted. Records
// made once the sink is closed (after the last frame) are written to late
// as lines, or dropped when late is nil.
type logSink struct {
	level   slog.LevelVar
	out     *frameWriter
	late    io.Writer
	mu      sync.Mutex
	queue   chan logMsg
	closed  bool
	dropped atomic.Int64
	done    chan struct{} // closed when the sender has returned
}

// newLogSink starts a sink's sender; close stops it.
func newLogSink(out *frameWriter, late io.Writer) *logSink {
	s := &logSink{out: out, late: late, queue: make(chan logMsg, 256), done: make(chan struct{})}
	s.level.Set(slog.LevelWarn)
	go func() {
		defer close(s.done)
		for m := range s.queue {
			s.out.write(m, nil) // a failed write stops the server; later ones fail at once
		}
	}()
	return s
}

func (s *logSink) send(m logMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		if s.late != nil {
			io.WriteString(s.late, m.line())
		}
		return
	}
	select {
	case s.queue <- m:
	default:
		s.dropped.Add(1)
	}
}

// line formats m as one line of the command's stderr.
func (m logMsg) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "damacy serve: %s: %s", levelWords[m.Level], m.Msg)
	keys := slices.Sorted(maps.Keys(m.Attrs))
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, m.Attrs[k])
	}
	b.WriteByte('\n')
	return b.String()
}

// levelWords names the protocol's log levels in stderr lines.
var levelWords = [...]string{"trace", "debug", "info", "warning", "error", "fatal"}

// close sends what is queued and stops the sender. It returns the number
// of records dropped because the client did not read them.
func (s *logSink) close() int64 {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.queue)
	}
	s.mu.Unlock()
	<-s.done
	return s.dropped.Load()
}

// logger returns a logger whose records become log frames.
func (s *logSink) logger() *slog.Logger {
	return slog.New(&frameHandler{sink: s})
}

// frameHandler is the slog.Handler of a logSink.
type frameHandler struct {
	sink   *logSink
	attrs  []slog.Attr
	prefix string // group prefix of attribute keys, "g." per group
}

func (h *frameHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.sink.level.Level()
}

func (h *frameHandler) Handle(_ context.Context, r slog.Record) error {
	m := logMsg{Op: "log", Level: protoLevel(r.Level), Msg: remote.Redact(strings.TrimPrefix(r.Message, "damacy: "))}
	if n := len(h.attrs) + r.NumAttrs(); n > 0 {
		m.Attrs = make(map[string]any, n)
		for _, a := range h.attrs {
			addAttr(m.Attrs, "", a)
		}
		r.Attrs(func(a slog.Attr) bool {
			addAttr(m.Attrs, h.prefix, a)
			return true
		})
	}
	h.sink.send(m)
	return nil
}

// addAttr adds a to m under prefix, flattening groups as "group.key" and
// turning values JSON cannot carry as they are into text; the secrets of
// URLs in text are masked.
func addAttr(m map[string]any, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			addAttr(m, prefix+a.Key+".", g)
		}
		return
	}
	if a.Key == "" {
		return
	}
	switch v.Kind() {
	case slog.KindString:
		m[prefix+a.Key] = remote.Redact(v.String())
	case slog.KindInt64:
		m[prefix+a.Key] = v.Int64()
	case slog.KindUint64:
		m[prefix+a.Key] = v.Uint64()
	case slog.KindFloat64:
		m[prefix+a.Key] = v.Float64()
	case slog.KindBool:
		m[prefix+a.Key] = v.Bool()
	case slog.KindTime:
		m[prefix+a.Key] = v.Time().Format(time.RFC3339Nano)
	default: // durations, errors, anything else
		m[prefix+a.Key] = remote.Redact(fmt.Sprint(v.Any()))
	}
}

func (h *frameHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], prefixed(h.prefix, as)...)
	return &h2
}

func (h *frameHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.prefix += name + "."
	return &h2
}

// prefixed returns as with each key under prefix.
func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}
