package pipeline

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Every error the pipeline returns is an *Error whose Kind
// is one of these, so callers test with errors.Is(err, pipeline.ErrDecode).
var (
	ErrInvalid     = errors.New("invalid argument")
	ErrNotFound    = errors.New("not found")
	ErrDtype       = errors.New("unsupported data type")
	ErrRank        = errors.New("rank mismatch")
	ErrStorage     = errors.New("storage error")
	ErrDecode      = errors.New("decode error")
	ErrCUDA        = errors.New("cuda error")
	ErrOutOfMemory = errors.New("out of memory")
	ErrBudget      = errors.New("budget exceeded")
	ErrShutdown    = errors.New("pipeline shut down")
	// ErrCanceled is the kind of an error from a call whose context ended
	// before the call finished (Pop, Shutdown). The pipeline stays as it
	// was; the error's Err is the context's error (and its cause, when
	// one was given), so errors.Is(err, context.Canceled) or
	// errors.Is(err, context.DeadlineExceeded) holds as well.
	ErrCanceled = errors.New("canceled")
)

// Error is the one error type of package pipeline.
type Error struct {
	Op   string // the operation: "new", "push", "pop", "read", "decode", ...
	Kind error  // one of the sentinels above
	URI  string // the array or file concerned, if any
	Err  error  // the underlying cause, if any
}

func (e *Error) Error() string {
	msg := "pipeline: " + e.Op
	if e.URI != "" {
		msg += " " + e.URI
	}
	msg += ": " + e.Kind.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns both the kind and the cause, so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func newError(op string, kind error, uri string, err error) *Error {
	return &Error{Op: op, Kind: kind, URI: uri, Err: err}
}

func errorf(op string, kind error, uri string, format string, args ...any) *Error {
	return &Error{Op: op, Kind: kind, URI: uri, Err: fmt.Errorf(format, args...)}
}

// canceled is the error of a call (op) that ctx ended: ErrCanceled with the
// context's error and, when it differs, its cause.
func canceled(op string, ctx context.Context) *Error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return newError(op, ErrCanceled, "", err)
}
