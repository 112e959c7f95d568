package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/damacy-go/damacy/pipeline"
)

// tracer records spans as Chrome trace events ("ph": "X"), viewable in
// chrome://tracing or Perfetto. A nil *tracer records nothing.
type tracer struct {
	t0     time.Time
	mu     sync.Mutex
	events []traceEvent
	lanes  map[string]int // pipeline lane -> row
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`  // microseconds since the start
	Dur  float64        `json:"dur"` // microseconds
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace rows (thread ids): one per kind of span.
const (
	traceRowPhases = 1 // generate, warmup, measure, ceilings
	traceRowPop    = 2 // each Pop: from the call to the batch
	traceRowHold   = 3 // the consumer's hold of each batch
)

func newTracer() *tracer { return &tracer{t0: time.Now(), lanes: map[string]int{}} }

// firstLaneRow is the row of the first pipeline lane; rows below are the
// command's own.
const firstLaneRow = 10

// pipelineSpan records one of the pipeline's stage spans (Config.Trace) on
// a row per lane: the planner, each IO and CPU worker, each CUDA stream.
func (t *tracer) pipelineSpan(s pipeline.Span) {
	t.mu.Lock()
	row, ok := t.lanes[s.Lane]
	if !ok {
		row = firstLaneRow + len(t.lanes)
		t.lanes[s.Lane] = row
	}
	args := map[string]any{"batch": s.Batch}
	if s.Wave >= 0 {
		args["wave"] = s.Wave
	}
	if s.Bytes > 0 {
		args["bytes"] = s.Bytes
	}
	name := s.Stage
	if s.Wave >= 0 {
		name = fmt.Sprintf("%s b%d w%d", s.Stage, s.Batch, s.Wave)
	} else if s.Batch >= 0 {
		name = fmt.Sprintf("%s b%d", s.Stage, s.Batch)
	}
	t.events = append(t.events, traceEvent{
		Name: name, Cat: s.Stage, Ph: "X",
		TS:  float64(s.Start.Sub(t.t0).Nanoseconds()) / 1e3,
		Dur: float64(s.End.Sub(s.Start).Nanoseconds()) / 1e3,
		PID: 1, TID: row, Args: args,
	})
	t.mu.Unlock()
}

// span records [start, end) on row.
func (t *tracer) span(row int, cat, name string, start, end time.Time, args map[string]any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.events = append(t.events, traceEvent{
		Name: name, Cat: cat, Ph: "X",
		TS:  float64(start.Sub(t.t0).Nanoseconds()) / 1e3,
		Dur: float64(end.Sub(start).Nanoseconds()) / 1e3,
		PID: 1, TID: row, Args: args,
	})
	t.mu.Unlock()
}

// write saves the trace as {"traceEvents": [...]} with row names.
func (t *tracer) write(path string) error {
	names := map[int]string{traceRowPhases: "phases", traceRowPop: "pop", traceRowHold: "consumer hold"}
	for lane, row := range t.lanes {
		names[row] = lane
	}
	evs := make([]any, 0, len(t.events)+len(names))
	for tid, name := range names {
		evs = append(evs, map[string]any{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": map[string]string{"name": name}})
	}
	for _, e := range t.events {
		evs = append(evs, e)
	}
	b, err := json.Marshal(map[string]any{"traceEvents": evs, "displayTimeUnit": "ms"})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
