// Package serve is the server side of `damacy serve`: one pipeline for one
// client (the Python package damacy) over a Unix stream socket, with the
// batches handed over without a copy. The protocol is
// cmd/damacy/python/PROTOCOL.md.
//
// Run serves one connection; InheritedConn and AcceptOne make that
// connection from an inherited descriptor or a listening socket.
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
	"os"
	"sync"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
)

// InheritedConn wraps the inherited Unix stream socket with descriptor fd
// (the client's socketpair end).
func InheritedConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "client socket")
	c, err := net.FileConn(f) // a dup: f is closed below
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("--fd %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("--fd %d is not a Unix socket", fd)
	}
	return uc, nil
}

// AcceptOne listens on the Unix socket path, returns the first connection
// and removes the socket file. It returns early, with ctx's cause, when ctx
// is done.
func AcceptOne(ctx context.Context, path string) (*net.UnixConn, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	defer l.Close() // removes the socket file
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.AcceptUnix()
	if err != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return c, err
}

// closeTimeout bounds closing the pipeline at shutdown: a GPU stream left
// waiting on a dead client's event must not keep the process alive.
const closeTimeout = 20 * time.Second

// server is one client's session: the pipeline, the batches the client
// holds, and the client events it released them after.
type server struct {
	conn *net.UnixConn
	out  *frameWriter
	logs *logSink
	log  *slog.Logger

	p       *pipeline.Pipeline // nil before hello
	cuda    bool               // the CUDA engine (else the host engine)
	ordinal int                // the CUDA engine's device

	pops      chan int64 // ids of pop requests, for the popper
	popCancel context.CancelFunc
	popDone   chan struct{} // closed when the popper has returned
	fdSent    map[int]bool  // popper only: slots whose memfd the client has

	mu   sync.Mutex
	held map[int64]*pipeline.Batch // batches the client holds, by id

	// Events the client released batches after, opened once each on an
	// executor of the pipeline's device (main loop only).
	ex     *cuda.Executor
	events map[cuda.IPCEventHandle]cuda.Event
}

// Options configure Run. The zero value serves with the defaults.
type Options struct{}

// Run serves the protocol on conn until the client closes, the connection
// fails or ctx is done, then closes the pipeline, releases what the client
// held, and closes conn. It returns nil when the client sent close (and
// closing went well) or closed its end.
func Run(ctx context.Context, conn *net.UnixConn, _ Options) error {
	defer conn.Close()
	out := &frameWriter{conn: conn}
	s := &server{conn: conn, out: out, logs: newLogSink(out), held: map[int64]*pipeline.Batch{}, fdSent: map[int]bool{}}
	s.log = s.logs.logger()
	// ctx ending wakes the read below.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	closeID, err := s.loop(ctx)
	if werr := s.out.failed(); werr != nil && err != nil {
		err = werr // the reader stopped because a write failed
	}
	if cerr := s.shutdown(closeID); err == nil {
		err = cerr
	}
	return err
}

// loop reads and handles requests. It returns the id of a close request,
// or nil when the stream ended (nil error), failed, or ctx is done.
func (s *server) loop(ctx context.Context) (closeID *int64, err error) {
	r := bufio.NewReaderSize(s.conn, 64<<10)
	for {
		b, err := readFrame(r)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, fmt.Errorf("serve: stopped: %w", context.Cause(ctx))
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, nil // the client closed its end or died
		default:
			return nil, err
		}
		var req request
		if err := json.Unmarshal(b, &req); err != nil {
			var head struct {
				ID *int64 `json:"id"`
			}
			if json.Unmarshal(b, &head) == nil && head.ID != nil {
				s.fail(*head.ID, "request", statusErrorf(statusInval, "malformed request: %v", err), nil)
			} else {
				s.log.Warn("ignoring a malformed message", "error", err)
			}
			continue
		}
		if req.Op == "close" && req.ID != nil {
			return req.ID, nil
		}
		s.handle(&req)
	}
}

// shutdown stops the popper (a blocked pop fails with SHUTDOWN), releases
// the batches the client holds, closes the pipeline and the client's
// events, flushes the log, and answers close.
func (s *server) shutdown(closeID *int64) error {
	// A client that stopped reading must not hold the process.
	s.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	var err error
	if s.p != nil {
		s.popCancel()
		close(s.pops)
		<-s.popDone
		s.mu.Lock()
		for id, b := range s.held {
			b.Release()
			delete(s.held, id)
		}
		s.mu.Unlock()
		closed := make(chan error, 1)
		go func() { closed <- s.p.Close() }()
		select {
		case err = <-closed:
			s.closeEvents()
		case <-time.After(closeTimeout):
			// The GPU is stuck (waiting on an event of a client that
			// died): leave it to the process's exit.
			err = fmt.Errorf("serve: the pipeline did not close within %v", closeTimeout)
			s.log.Error(err.Error())
		}
		if err != nil {
			err = fmt.Errorf("serve: closing the pipeline: %w", err)
		}
	}
	closeErr := err
	if n := s.logs.close(); n > 0 {
		err = errors.Join(err, fmt.Errorf("serve: %d log records could not be sent", n))
	}
	if closeID != nil {
		s.answer(*closeID, "close", nil, closeErr)
	}
	return err
}

// handle answers one request (close excepted).
func (s *server) handle(req *request) {
	if req.ID == nil {
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
	id := *req.ID
	if req.Op != "hello" && s.p == nil {
		s.fail(id, req.Op, statusErrorf(statusInval, "%s before hello: the first request must be hello", req.Op), nil)
		return
	}
	switch req.Op {
	case "hello":
		s.hello(id, req)
	case "push":
		s.push(id, req)
	case "pop":
		select {
		case s.pops <- id:
		default:
			s.fail(id, "pop", statusErrorf(statusAgain, "%d pops are waiting already", cap(s.pops)), nil)
		}
	case "flush":
		s.answer(id, "flush", nil, s.p.Flush())
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
func (s *server) fail(id int64, what string, err error, index *int) {
	e := errorMsg{Status: statusOf(err), What: what, Message: err.Error(), Index: index}
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
