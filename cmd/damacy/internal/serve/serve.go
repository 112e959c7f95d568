// Package serve is the server side of `damacy serve`: one pipeline for one
// client (the Python package damacy) over a Unix stream socket, with the
// batches handed over without a copy. The protocol is
// cmd/damacy/python/PROTOCOL.md.
//
// Run serves one connection; InheritedConn and AcceptOne make that
// connection from an inherited descriptor or a listening socket; Main is
// the whole of the command: Run plus what a server process does on its
// way out (signals, the driver's files in /dev/shm).
package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/remote"
)

// Defaults of Options and the other bounds of a stop.
const (
	// DefaultWriteTimeout bounds each frame write: a client that reads
	// nothing for that long is taken for stuck, and the server stops.
	DefaultWriteTimeout = 30 * time.Second

	// closeTimeout bounds closing the pipeline at shutdown: a GPU stream
	// left waiting on a dead client's event must not keep the process
	// alive. The client waits longer (10 s) for the answer to close.
	closeTimeout = 5 * time.Second

	// stopGrace bounds each write once the server is stopping (the
	// answers of waiting pops, the log, closing or the close answer).
	stopGrace = 2 * time.Second
)

// Options configure Run. The zero value serves with the defaults.
type Options struct {
	// ParentPID, when not 0, is the pid of the process that started the
	// server (the client, which passes --parent-pid). Run fails at once
	// unless it is this process's parent, and stops when that process
	// (not merely the thread that started the server) exits.
	ParentPID int

	// WriteTimeout bounds each frame write (0: DefaultWriteTimeout). A
	// write that times out stops the server.
	WriteTimeout time.Duration

	// Stderr receives the log records that can no longer be sent (those
	// made after the last frame), one line each; nil discards them.
	Stderr io.Writer

	// Version names the build in hello's answer, whose server field is
	// "damacy " + Version (the command passes its release and revision).
	Version string
}

// server is one client's session: the pipeline, the batches the client
// holds, and the done events of the slots.
type server struct {
	conn *net.UnixConn
	out  *frameWriter
	logs *logSink
	log  *slog.Logger

	version string // Options.Version, for hello's answer

	p         *pipeline.Pipeline // nil before hello
	cuda      bool               // the CUDA engine (else the host engine)
	ordinal   int                // the CUDA engine's device
	slots     int                // Config.BatchSlots in effect
	batchSize int                // Config.BatchSize in effect
	check     bool               // push opens the arrays (config.on_error "raise")

	pops      chan int64 // ids of pop requests, for the popper
	popCancel context.CancelFunc
	popDone   chan struct{}   // closed when the popper has returned
	fdSent    map[[2]int]bool // popper only: (tensor, slot) pairs whose memfd the client has

	mu      sync.Mutex
	held    map[int64]heldBatch // batches the client holds, by id
	formed  int64               // batches that pushes and flushes have made complete
	claimed int64               // of those, the batches pops took or will take
	partial int                 // samples pushed since the last complete batch
	done    map[int]doneEvent   // CUDA engine: the done event of each slot sent so far

	// ex makes and destroys the done events, on the pipeline's device;
	// the popper makes it, shutdown closes it once the popper is done.
	ex *cuda.Executor

	smp samplers // the client's samplers (sampler.go)
}

// heldBatch is a batch the client holds and its slot.
type heldBatch struct {
	b    *pipeline.Batch
	slot int
}

// doneEvent is a slot's done event: made by the server, interprocess,
// recorded by the client after its last use of a batch of the slot.
type doneEvent struct {
	ev     cuda.Event
	handle string // hex of its IPC handle
}

// ending is why the request loop returned.
type ending struct {
	closeID *int64 // the client's close request, to answer last
	err     error  // nil for the client's close or end of stream
	status  string // of the closing message; "" sends none
	reason  string // of the closing message
}

// Run serves the protocol on conn until the client closes, the connection
// fails, the parent process exits (Options.ParentPID) or ctx is done, then
// closes the pipeline, releases what the client held, and closes conn. A
// stop the client did not ask for (ctx, a malformed frame, the parent's
// exit) first answers the waiting pops and sends a closing message, the
// last frame. Run returns nil when the client sent close (and closing
// went well) or closed its end.
func Run(ctx context.Context, conn *net.UnixConn, opts Options) error {
	defer conn.Close()
	if opts.ParentPID != 0 {
		var stop func()
		var err error
		if ctx, stop, err = watchParent(ctx, opts.ParentPID); err != nil {
			return err
		}
		defer stop()
	}
	timeout := opts.WriteTimeout
	if timeout <= 0 {
		timeout = DefaultWriteTimeout
	}
	out := &frameWriter{conn: conn, timeout: timeout}
	s := &server{conn: conn, out: out, logs: newLogSink(out, opts.Stderr), version: opts.Version, held: map[int64]heldBatch{}, fdSent: map[[2]int]bool{}, done: map[int]doneEvent{}}
	s.log = s.logs.logger()
	// ctx ending wakes the read below and hurries a write that waits for
	// a client that does not read.
	stop := context.AfterFunc(ctx, func() {
		conn.SetReadDeadline(time.Now())
		out.hurry(stopGrace)
	})
	defer stop()
	return s.shutdown(s.loop(ctx))
}

// loop reads and handles requests until the client sends close or the
// stream ends, fails, or ctx is done.
func (s *server) loop(ctx context.Context) ending {
	r := bufio.NewReaderSize(s.conn, 64<<10)
	for {
		if ctx.Err() != nil || s.out.failed() != nil {
			return s.readEnding(ctx, nil) // frames read ahead are not handled
		}
		b, err := readFrame(r)
		if err != nil {
			return s.readEnding(ctx, err)
		}
		id, ok := s.requestID(b)
		if !ok {
			continue
		}
		var req request
		if err := json.Unmarshal(b, &req); err != nil {
			if id != nil {
				s.fail(*id, "request", statusErrorf(statusInval, "malformed request: %v", err), nil)
			} else {
				s.log.Warn("ignoring a malformed message", "error", err)
			}
			continue
		}
		if req.Op == "close" && id != nil {
			return ending{closeID: id}
		}
		s.handle(id, &req)
	}
}

// readEnding says why the loop ends: a failed write, ctx, or err, the
// error of the last read.
func (s *server) readEnding(ctx context.Context, err error) ending {
	var fe *frameError
	switch {
	case ctx.Err() != nil: // a write that failed since was hurried by the stop
		cause := context.Cause(ctx)
		reason := cause.Error()
		if cause == context.Canceled {
			reason = "interrupted"
		}
		return ending{err: fmt.Errorf("serve: stopped: %s", reason), status: statusShutdown, reason: reason}
	case s.out.failed() != nil:
		return ending{err: s.out.failed()} // the reader was woken: no closing can be sent
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ending{} // the client closed its end or died
	case errors.As(err, &fe):
		return ending{err: err, status: statusInval, reason: fe.Error()}
	}
	return ending{err: fmt.Errorf("serve: reading from the client: %w", err), status: statusIO, reason: err.Error()}
}

// requestID reads a message's "id": nil when it has none (a one-way
// message). A message that is not a JSON object is logged and skipped
// (ok false); an id that is not a non-negative integer is answered, as
// sent, with an INVAL error (ok false).
func (s *server) requestID(b []byte) (id *int64, ok bool) {
	var head struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		s.log.Warn("ignoring a message that is not a JSON object", "error", err)
		return nil, false
	}
	if len(head.ID) == 0 || string(head.ID) == "null" {
		return nil, true
	}
	u, err := strconv.ParseUint(string(head.ID), 10, 63) // digits only: not -0, 1.0 or 1e3
	if err != nil {
		e := errorMsg{Status: statusInval, What: "request", Message: fmt.Sprintf("id %s: want a non-negative integer below 2^63", head.ID)}
		s.out.write(map[string]any{"id": head.ID, "ok": false, "error": e}, nil)
		return nil, false
	}
	n := int64(u)
	return &n, true
}

// shutdown stops the popper (waiting pops fail with SHUTDOWN), sends the
// log and the closing message when e has one, releases the batches the
// client holds, closes the pipeline and the slots' done events, and
// answers close. It returns Run's error.
func (s *server) shutdown(e ending) error {
	s.out.hurry(stopGrace)
	if s.p != nil {
		s.popCancel()
		close(s.pops)
		<-s.popDone
	}
	if e.status != "" {
		s.sendLog(&e.err)
		if err := s.out.write(closingMsg{Op: "closing", Status: e.status, Reason: e.reason}, nil); err == nil {
			s.conn.Close() // the last frame: the client sees the end of the stream now
		}
	}
	var closeErr error
	if s.p != nil {
		s.mu.Lock()
		for id, h := range s.held {
			h.b.Release()
			delete(s.held, id)
		}
		s.mu.Unlock()
		closed := make(chan error, 1)
		go func() { closed <- s.p.Close() }()
		select {
		case closeErr = <-closed:
			s.closeEvents()
		case <-time.After(closeTimeout):
			// The GPU is stuck (waiting on an event of a client that
			// died): leave it to the process's exit.
			closeErr = fmt.Errorf("not closed within %v", closeTimeout)
		}
		if closeErr != nil {
			closeErr = fmt.Errorf("serve: closing the pipeline: %w", closeErr)
		}
	}
	err := errors.Join(e.err, closeErr)
	if e.status == "" {
		s.sendLog(&err)
		if e.closeID != nil {
			s.answer(*e.closeID, "close", nil, closeErr)
		}
	}
	return err
}

// sendLog sends the log records queued and stops the log sink; records
// dropped because the client did not read them are added to *err.
func (s *server) sendLog(err *error) {
	if n := s.logs.close(); n > 0 {
		*err = errors.Join(*err, fmt.Errorf("serve: %d log records could not be sent", n))
	}
}

// handle answers one request (close excepted); id is nil for a one-way
// message.
func (s *server) handle(reqID *int64, req *request) {
	if reqID == nil {
		switch req.Op {
		case "release":
			if s.p == nil {
				s.log.Warn("release before hello: ignored")
				return
			}
			s.release(req)
		default:
			s.log.Warn("ignoring a request without an id", "op", req.Op)
		}
		return
	}
	id := *reqID
	if s.samplerOp(id, req) { // samplers need no pipeline
		return
	}
	// set_log_level needs no pipeline either: a sampler's own server gets
	// one before any hello (or none).
	if req.Op != "hello" && req.Op != "set_log_level" && s.p == nil {
		s.fail(id, req.Op, statusErrorf(statusInval, "%s before hello: the first request must be hello", req.Op), nil)
		return
	}
	switch req.Op {
	case "hello":
		s.hello(id, req)
	case "push":
		s.push(id, req)
	case "pop":
		s.pop(id)
	case "flush":
		s.flush(id)
	case "pending":
		s.reply(id, map[string]any{"pending": s.p.Pending()}, nil)
	case "stats":
		s.reply(id, map[string]any{"stats": statsOf(s.p.Stats())}, nil)
	case "stats_reset":
		s.p.StatsReset()
		s.reply(id, nil, nil)
	case "set_log_level":
		if req.Level == nil || *req.Level < 0 || *req.Level >= len(protoLevels) {
			s.fail(id, "set_log_level", statusErrorf(statusInval, "level must be 0 (TRACE) to 5 (FATAL)"), nil)
			return
		}
		s.logs.level.Set(protoLevels[*req.Level])
		s.reply(id, nil, nil)
	case "release":
		s.fail(id, "release", statusErrorf(statusInval, "release is one-way: it takes no id"), nil)
	default:
		s.fail(id, req.Op, statusErrorf(statusInval, "unknown op %q", req.Op), nil)
	}
}

// reply sends a success response with fields and fds.
func (s *server) reply(id int64, fields map[string]any, fds []int) {
	m := map[string]any{"id": id, "ok": true}
	for k, v := range fields {
		m[k] = v
	}
	s.out.write(m, fds)
}

// fail sends an error response for op what; index names a push's sample.
// A pipeline error names the Config fields at fault as the client's
// Config spells them.
func (s *server) fail(id int64, what string, err error, index *int) {
	msg := err.Error()
	if pe := (*pipeline.Error)(nil); errors.As(err, &pe) {
		msg = pythonNames(msg)
	}
	se := sampleErrorOf(err)
	e := errorMsg{Status: statusOf(err), What: what, Message: remote.Redact(msg), Index: index,
		Position: se.Position, URI: se.URI, Source: se.Source, Chunk: se.Chunk}
	s.out.write(map[string]any{"id": id, "ok": false, "error": e}, nil)
}

// answer replies ok, or with err.
func (s *server) answer(id int64, what string, fields map[string]any, err error) {
	if err != nil {
		s.fail(id, what, err, nil)
		return
	}
	s.reply(id, fields, nil)
}
