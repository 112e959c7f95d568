package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/damacy-go/damacy/zarr/remote"
)

// lineHandler writes the pipeline's log records to stderr as the command's
// own messages: the text (which carries its "damacy:" prefix) and the
// attributes as key=value, one line each, without time or level, the
// secrets of URLs masked.
type lineHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	attrs []slog.Attr
}

// newLogger returns a logger that writes lines to w.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(&lineHandler{mu: new(sync.Mutex), w: w})
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	msg := r.Message
	if !strings.HasPrefix(msg, "damacy") {
		msg = "damacy: " + msg
	}
	if r.Level >= slog.LevelWarn {
		msg = strings.Replace(msg, ": ", ": "+strings.ToLower(r.Level.String())+": ", 1)
	}
	b.WriteString(msg)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, remote.Redact(b.String()))
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &lineHandler{mu: h.mu, w: h.w, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

// WithGroup is not needed by the pipeline's few lines; attributes of a
// group are written without its name.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
