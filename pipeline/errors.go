package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/damacy-go/damacy/zarr/remote"
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

// Error is the one error type of package pipeline. An error about one
// sample's data (a batch's, at Pop, or a skipped sample's, Batch.Skipped)
// names the sample by Position and, where they apply, its Source and the
// Chunk that failed; Op then says "(sample N: URI[box])" too.
type Error struct {
	Op   string // the operation: "new", "push", "pop", "read", "decode", ...
	Kind error  // one of the sentinels above
	URI  string // the array or file concerned, if any
	Err  error  // the underlying cause, if any
	// Position is the sample's place in the pipeline's intake, counted
	// from 1: the Nth sample pushed (by Push or PushSeq, in order), as
	// Sample.Seed's default counts. 0: the error is about no one sample
	// (or, from Push, about a sample it did not take: Op then names the
	// sample's index in that call).
	Position int64
	// Source is the name of the source (Config.Sources) whose array the
	// error is about, with several sources; else empty.
	Source string
	// Chunk is the store key of the chunk (or the shard holding it) that
	// could not be read or decoded, relative to URI; else empty.
	Chunk string

	// at and n are the bytes of Chunk that failed, for finding the sample
	// that reads them (n == 0: unknown).
	at, n int64
}

// Error returns "pipeline: OP URI: KIND: CAUSE", saying each thing once.
// The cause is Err's message less what the rest already says: another
// package's prefix ("zarr", "remote"), the URI itself, an operation on the
// URI or on a key said before ("stat URI", "open KEY"), the kind, and a
// segment that an earlier one holds (a wrapper that names the chunk and
// offset, then the chunk's own error naming them again). Paths below the URI are named relative to it. The
// URI is left out of the head when the operation or the cause names it
// (a sample "URI[box]"). The secrets of URLs are masked (remote.Redact):
// a presigned URI's query values, a password.
func (e *Error) Error() string {
	msg := "pipeline: " + e.Op
	cause := e.cause()
	if e.URI != "" && !hasWords(e.Op, e.URI) && !hasWords(cause, e.URI) {
		msg += " " + e.URI
	}
	msg += ": " + e.Kind.Error()
	if cause != "" {
		msg += ": " + cause
	}
	return remote.Redact(msg)
}

// cause is the text of Err that Error shows.
func (e *Error) cause() string {
	if e.Err == nil {
		return ""
	}
	said := []string{e.Op, e.Kind.Error()}
	// An object store names the objects below an http(s):// URI without
	// its query.
	bare, _, _ := strings.Cut(e.URI, "?")
	var kept []string
	for _, seg := range strings.Split(e.Err.Error(), ": ") {
		if e.URI != "" {
			seg = below(below(seg, e.URI), bare)
		}
		switch {
		case seg == "zarr" || seg == "remote" || seg == "pipeline":
		case e.URI != "" && seg == e.URI, onSaid(seg, e.URI, kept):
		case slices.ContainsFunc(said, func(s string) bool { return hasWords(s, seg) }):
		default:
			kept = append(kept, seg)
			said = append(said, seg)
		}
	}
	return strings.Join(kept, ": ")
}

// below returns s with each path below uri ("URI/c/0/0") made relative to
// it ("c/0/0").
func below(s, uri string) string {
	prefix := strings.TrimSuffix(uri, "/") + "/"
	for i := 0; ; {
		j := strings.Index(s[i:], prefix)
		if j < 0 {
			return s
		}
		at := i + j
		if at == 0 || !wordByte(s[at-1]) {
			s = s[:at] + s[at+len(prefix):]
		}
		i = at + 1
	}
}

// onSaid reports whether seg is an operation on the URI or on what an
// earlier segment names: one word, then that name ("stat /data/x.zarr",
// "open c/0/0").
func onSaid(seg, uri string, said []string) bool {
	op, name, ok := strings.Cut(seg, " ")
	if !ok || op == "" || strings.Contains(op, ":") {
		return false
	}
	return uri != "" && name == uri || slices.Contains(said, name)
}

// hasWords reports whether s holds w, not inside a longer word or path.
func hasWords(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		at, end := i+j, i+j+len(w)
		if (at == 0 || !wordByte(s[at-1])) && (end == len(s) || !wordByte(s[end])) {
			return true
		}
		i = at + 1
	}
}

func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-'
}

// Unwrap returns both the kind and the cause, so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// inChunk says that e is about bytes [at, at+n) of the chunk or shard
// key (n == 0: which bytes is not known).
func (e *Error) inChunk(key string, at, n int64) *Error {
	e.Chunk, e.at, e.n = key, at, n
	return e
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
