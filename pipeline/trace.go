package pipeline

import (
	"fmt"
	"strings"
	"time"
)

// Span is one stretch of a stage's work, reported to Config.Trace: enough
// to draw where the time goes (per batch and wave, per IO and CPU worker,
// per CUDA stream) in a trace viewer.
type Span struct {
	Stage string // "plan", "read", "map", "check", "decode", "layout", "submit", "h2d", "assemble", "wait", "pop"
	Lane  string // where it ran: "planner", "io worker 3", "io stage", "cpu worker 0", "prepare", "submit", "copy stream", "decode stream", "assemble stream", "retire", "consumer"
	Batch int64  // the batch's ID (-1: none)
	Wave  int    // the wave within the batch (-1: the whole batch)
	Start time.Time
	End   time.Time
	Bytes int64 // bytes the span handled (read, copied, decoded or written), when known
}

// tracer forwards spans to Config.Trace; a nil tracer costs nothing.
type tracer func(Span)

func (t tracer) span(s Span) {
	if t != nil {
		t(s)
	}
}

// workers returns a work.Pool.Run span callback that reports one span per
// worker, or nil when not tracing.
func (t tracer) workers(stage, kind string, w *wave, bytes int64) func(int, time.Time, time.Time) {
	if t == nil {
		return nil
	}
	return func(id int, start, end time.Time) {
		t(Span{Stage: stage, Lane: fmt.Sprintf("%s worker %d", kind, id), Batch: w.batch.req.id, Wave: w.index, Start: start, End: end, Bytes: bytes})
	}
}

// phases times the steps of an engine's setup for its log line, as
// "step 12ms, step 3ms, ..." in the order they ran.
type phases struct {
	last  time.Time
	steps []string
}

func newPhases() *phases { return &phases{last: time.Now()} }

// mark ends the step called name: it ran since the previous mark.
func (p *phases) mark(name string) {
	now := time.Now()
	p.steps = append(p.steps, fmt.Sprintf("%s %s", name, now.Sub(p.last).Round(100*time.Microsecond)))
	p.last = now
}

func (p *phases) String() string { return strings.Join(p.steps, ", ") }
