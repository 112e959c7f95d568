package serve

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestProtoLevel(t *testing.T) {
	for _, tt := range []struct {
		l    slog.Level
		want int
	}{
		{slog.LevelDebug - 8, 0}, {slog.LevelDebug - 4, 0}, {slog.LevelDebug - 1, 0}, {slog.LevelDebug, 1},
		{slog.LevelInfo, 2}, {slog.LevelInfo + 1, 2}, {slog.LevelWarn, 3}, {slog.LevelError, 4}, {slog.LevelError + 4, 5}, {100, 5},
	} {
		if got := protoLevel(tt.l); got != tt.want {
			t.Errorf("protoLevel(%v) = %d, want %d", tt.l, got, tt.want)
		}
	}
	for i, l := range protoLevels {
		if protoLevel(l) != i {
			t.Errorf("protoLevel(protoLevels[%d]) = %d", i, protoLevel(l))
		}
	}
}

func TestFrameHandlerAttrs(t *testing.T) {
	s := &logSink{queue: make(chan logMsg, 4)}
	s.level.Set(slog.LevelDebug)
	log := slog.New(&frameHandler{sink: s}).With("engine", "host").WithGroup("g")
	log.Warn("damacy: something", "n", 3, "err", errors.New("boom"), "d", 1500*time.Millisecond, slog.Group("sub", "ok", true))
	log.Debug("quiet")
	if len(s.queue) != 2 {
		t.Fatalf("%d records queued, want 2", len(s.queue))
	}
	m := <-s.queue
	want := logMsg{Op: "log", Level: 3, Msg: "something", Attrs: map[string]any{
		"engine": "host", "g.n": int64(3), "g.err": "boom", "g.d": "1.5s", "g.sub.ok": true,
	}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("log frame %+v, want %+v", m, want)
	}
	s.level.Set(slog.LevelInfo)
	if log.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("DEBUG enabled at level INFO")
	}
}

// TestLogSinkLate: records made once the sink is closed go to its late
// writer as lines, not to the client.
func TestLogSinkLate(t *testing.T) {
	var late strings.Builder
	s := newLogSink(nil, &late)
	if n := s.close(); n != 0 {
		t.Fatalf("close of an empty sink: %d dropped", n)
	}
	s.logger().Error("damacy: pipeline did not close", "after", 5*time.Second, "batch", 3)
	if want := "damacy serve: error: pipeline did not close after=5s batch=3\n"; late.String() != want {
		t.Errorf("late line %q, want %q", late.String(), want)
	}
}
