package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// sentinels are the kinds errors.go documents.
var sentinels = []error{ErrInvalid, ErrNotFound, ErrDtype, ErrRank, ErrStorage, ErrDecode, ErrCUDA, ErrOutOfMemory,
	ErrBudget, ErrShutdown, ErrCanceled}

// checkError fails unless err is an *Error whose Kind is one of the
// sentinels and which matches each of want under errors.Is.
func checkError(t *testing.T, what string, err error, want ...error) {
	t.Helper()
	var e *Error
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case !errors.As(err, &e) || e != err:
		t.Errorf("%s: %T %v, want an *Error", what, err, err)
	case !slices.Contains(sentinels, e.Kind):
		t.Errorf("%s: %v: kind %v is not a sentinel of errors.go", what, err, e.Kind)
	default:
		zarrtest.CheckMessage(t, what, err, e.URI)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("%s: %v, want errors.Is(err, %v)", what, err, w)
		}
	}
}

// TestErrorsAreTyped checks the errors of the calls a caller makes, and of
// a context that ends a wait, against errors.go's promise: every error is
// an *Error of a sentinel kind.
func TestErrorsAreTyped(t *testing.T) {
	cfg := Config{BatchSize: 1, SampleShape: []int{2, 3}}
	p := newFake(t, cfg, &fakeEngine{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Pop(cancelled)
	checkError(t, "Pop with a cancelled context", err, ErrCanceled, context.Canceled)

	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	_, err = p.Pop(short)
	checkError(t, "Pop with an expiring context", err, ErrCanceled, context.DeadlineExceeded)

	cause := errors.New("the consumer went away")
	withCause, cancel3 := context.WithCancelCause(context.Background())
	cancel3(cause)
	_, err = p.Pop(withCause)
	checkError(t, "Pop with a context cancelled with a cause", err, ErrCanceled, context.Canceled, cause)

	if err := p.Push(sample(0)); err != nil {
		t.Fatal(err)
	}
	short, cancel4 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel4()
	checkError(t, "Shutdown with nothing popped", p.Shutdown(short), ErrCanceled, context.DeadlineExceeded)

	checkError(t, "Push after Shutdown", p.Push(sample(1)), ErrShutdown)
	checkError(t, "Flush after Shutdown", p.Flush(), ErrShutdown)
	checkError(t, "PushSeq after Shutdown", p.PushSeq(func(func(Sample) bool) {}), ErrShutdown)
	p.Close()
	_, err = p.Pop(context.Background())
	checkError(t, "Pop after Close", err, ErrShutdown)

	_, err = New(Config{BatchSize: -1})
	checkError(t, "New with a bad field", err, ErrInvalid)
	_, err = ParseDtype("f16")
	checkError(t, "ParseDtype", err, ErrInvalid)
}

// TestEmitTypesContextErrors checks the engines' one exit for results: a
// batch that the pipeline's own context ended (Close while its wave was
// read or decoded) leaves as ErrShutdown, not as a bare context error.
func TestEmitTypesContextErrors(t *testing.T) {
	bs := &batchState{req: &batchReq{id: 3}}
	bs.fail(context.Canceled)
	out := make(chan *result, 1)
	if !bs.emit(context.Background(), out) {
		t.Fatal("emit reported a done context")
	}
	checkError(t, "a batch ended by the pipeline's context", (<-out).err, ErrShutdown, context.Canceled)

	bs = &batchState{req: &batchReq{id: 4}}
	decode := newError("decode", ErrDecode, "x", errors.New("bad frame"))
	bs.fail(decode)
	bs.emit(context.Background(), out)
	if err := (<-out).err; err != decode {
		t.Fatalf("emit changed a typed error: %v, want %v", err, decode)
	}
}

// errorTexts are Errors and their messages: the cause less what the head
// says already.
var errorTexts = []struct {
	err  *Error
	want string
}{
	{&Error{Op: "pop", Kind: ErrShutdown}, "pipeline: pop: pipeline shut down"},
	{&Error{Op: "open", Kind: ErrNotFound, URI: "/d/x.zarr",
		Err: errors.New("zarr: /d/x.zarr: not found: zarr: store root: stat /d/x.zarr: no such file or directory")},
		"pipeline: open /d/x.zarr: not found: store root: no such file or directory"},
	{&Error{Op: "read", Kind: ErrStorage, URI: "/d/x.zarr", Err: errors.New("c/0/0: zarr: open /d/x.zarr/c/0/0: permission denied")},
		"pipeline: read /d/x.zarr: storage error: c/0/0: permission denied"},
	{&Error{Op: "decode", Kind: ErrDecode, URI: "/d/x.zarr", Err: errors.New("chunk c/1/1 at offset 0 (137 bytes): zarr: c/1/1: offset 0: zstd: bad")},
		"pipeline: decode /d/x.zarr: decode error: chunk c/1/1 at offset 0 (137 bytes): zstd: bad"},
	// The URI inside the op or the cause leaves the head.
	{&Error{Op: "plan (sample 2: /d/x.zarr[0:4])", Kind: ErrRank, URI: "/d/x.zarr", Err: errors.New("box rank 1, array rank 3")},
		"pipeline: plan (sample 2: /d/x.zarr[0:4]): rank mismatch: box rank 1, array rank 3"},
	{&Error{Op: "push", Kind: ErrInvalid, URI: "/d/x.zarr", Err: errors.New("sample /d/x.zarr[0:4]: axis 0 is empty")},
		"pipeline: push: invalid argument: sample /d/x.zarr[0:4]: axis 0 is empty"},
	// A longer name that starts like the URI is another object.
	{&Error{Op: "read", Kind: ErrStorage, URI: "/d/x", Err: errors.New("zarr: /d/x.zarr/c/0: not a regular file")},
		"pipeline: read /d/x: storage error: /d/x.zarr/c/0: not a regular file"},
	{&Error{Op: "read", Kind: ErrStorage, URI: "x.zarr", Err: errors.New("zarr: open /d/x.zarr/c/0: permission denied")},
		"pipeline: read x.zarr: storage error: open /d/x.zarr/c/0: permission denied"},
	{&Error{Op: "read", Kind: ErrStorage, URI: "http://h:9/b/x.zarr",
		Err: errors.New("remote: GET http://h:9/b/x.zarr/c/1/0/0: 403 Forbidden (AccessDenied): denied")},
		"pipeline: read http://h:9/b/x.zarr: storage error: GET c/1/0/0: 403 Forbidden (AccessDenied): denied"},
	{&Error{Op: "pop", Kind: ErrCanceled, Err: fmt.Errorf("%w: %w", context.Canceled, errors.New("the consumer went away"))},
		"pipeline: pop: canceled: context canceled: the consumer went away"},
}

func TestErrorText(t *testing.T) {
	for _, tt := range errorTexts {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error{%q, %v, %q, %q}.Error() =\n%q; want\n%q", tt.err.Op, tt.err.Kind, tt.err.URI, tt.err.Err, got, tt.want)
		}
	}
}
