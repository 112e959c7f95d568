package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/zarr"
)

// backend issues single requests of one scheme; Store retries them,
// bounds their concurrency and checks their responses.
type backend interface {
	// do sends one request, method GET or HEAD, for the object key; rng is
	// the Range header's value, or "". It returns the response whatever
	// its status (with the service's error code for a failure, when the
	// scheme has one), or a transport error when none came.
	do(ctx context.Context, method, key, rng string) (*response, error)
	// uri returns the URI of the object key, for messages.
	uri(key string) string
	// endpoint returns the URL of the server the requests go to.
	endpoint() string
	// server names that server for messages.
	server() server
	// bucket returns the bucket's name; "" for a web server.
	bucket() string
	// denied says, for a 401 or 403 (with the service's error code) to a
	// request for key, what the request carried and what to check.
	denied(key, code string) string
}

// response is what a backend got back.
type response struct {
	status int
	header http.Header
	length int64         // Content-Length; -1 when unknown
	body   io.ReadCloser // never nil
	code   string        // the service's error code ("SlowDown", "AccessDenied"), if any
	msg    string        // the service's error message, if any
}

// Store is an object store bucket, or a web server, behind the zarr.Store
// interface: keys are object paths below its root. Make one with
// Opener.Open. It is safe for concurrent use.
//
// ReadAt, Size and ReadTail run under the Opener's lifetime (Close aborts
// them); ReadRanges takes a context.
type Store struct {
	o  *Opener
	be backend
	// noSuffix is set once the server has refused or ignored a suffix
	// range: tails are then read with a HEAD and an absolute range.
	noSuffix atomic.Bool
}

// URI returns the URI of the object key.
func (s *Store) URI(key string) string { return s.be.uri(key) }

// Endpoint returns the server the store's requests go to, as a URL
// without credentials or query: the S3 endpoint (a custom one, else AWS's
// regional one), the GCS XML API's, or the web server's.
func (s *Store) Endpoint() string { return s.be.endpoint() }

// Range is one destination of ReadRanges: len(Buf) bytes of the object
// from byte Off. It is not zarr.Range: that is a half-open interval of
// element indices along one axis of an array, while this is a byte span of
// a stored object together with the buffer it is read into, so the two
// share neither units nor fields.
type Range struct {
	Off int64
	Buf []byte
}

// ReadRanges fills the ranges of the object key with one GET of the span
// from the first range's start to the last one's end, discarding the bytes
// between them as they stream past, so a caller can coalesce neighbouring
// chunks into one request at no cost in memory. The ranges must be sorted
// by Off and must not overlap. A failure partway is retried for the bytes
// still missing. When the object ends before the last range does, the
// error wraps io.ErrUnexpectedEOF and is not an *Error; an absent object
// is an *Error matching fs.ErrNotExist.
func (s *Store) ReadRanges(ctx context.Context, key string, ranges []Range) error {
	if len(ranges) == 0 {
		return nil
	}
	for i, r := range ranges {
		if r.Off < 0 || (i > 0 && r.Off < ranges[i-1].Off+int64(len(ranges[i-1].Buf))) {
			return fmt.Errorf("remote: read %s: ranges not sorted, or overlapping, at %d", s.URI(key), i)
		}
	}
	k := newSink(ranges)
	if k.pos == k.end {
		return nil
	}
	err := s.get(ctx, key, k)
	var short *shortObject
	if errors.As(err, &short) {
		return fmt.Errorf("remote: GET %s: the object's %d bytes end before byte %d: %w", s.URI(key), short.size, k.end, io.ErrUnexpectedEOF)
	}
	return err
}

// ReadAt implements zarr.Store: one ranged GET (retried as ReadRanges
// says). When the object ends before off+len(p), it returns the bytes
// there and io.EOF.
func (s *Store) ReadAt(key string, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("remote: read %s: negative offset %d", s.URI(key), off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	k := newSink([]Range{{Off: off, Buf: p}})
	err := s.get(s.o.ctx, key, k)
	var short *shortObject
	if errors.As(err, &short) {
		return int(max(0, min(short.size, k.end)-off)), io.EOF
	}
	if err != nil {
		return int(k.pos - off), err
	}
	return len(p), nil
}

// Size implements zarr.Store with a HEAD request (a GET of the first byte
// when the server refuses HEAD).
func (s *Store) Size(key string) (int64, error) {
	return s.size(s.o.ctx, key)
}

func (s *Store) size(ctx context.Context, key string) (int64, error) {
	var size int64 = -1
	err := s.do(ctx, http.MethodHead, key, func() string { return "" }, func(r *response) (bool, error) {
		if r.status == http.StatusOK && r.length >= 0 {
			size = r.length
			return false, nil
		}
		return false, errNoLength
	})
	var e *Error
	if errors.Is(err, errNoLength) || errors.As(err, &e) && (e.Status == http.StatusMethodNotAllowed || e.Status == http.StatusNotImplemented) {
		return s.sizeByGet(ctx, key)
	}
	return size, err
}

var errNoLength = errors.New("no Content-Length")

// sizeByGet learns an object's size from a GET of its first byte: the
// total of a 206's Content-Range, the length of a 200, or 0 for a 416.
func (s *Store) sizeByGet(ctx context.Context, key string) (int64, error) {
	var size int64 = -1
	err := s.do(ctx, http.MethodGet, key, func() string { return "bytes=0-0" }, func(r *response) (bool, error) {
		switch r.status {
		case http.StatusPartialContent:
			if cr, ok := parseContentRange(r.header.Get("Content-Range")); ok && cr.total >= 0 {
				size = cr.total
				return false, nil
			}
		case http.StatusOK:
			if r.length >= 0 {
				size = r.length
				return false, nil
			}
			n, err := io.Copy(io.Discard, r.body)
			if err != nil {
				return true, err
			}
			size = n
			return false, nil
		case http.StatusRequestedRangeNotSatisfiable:
			size = 0
			return false, nil
		}
		return false, fmt.Errorf("cannot tell the object's size from a %d response", r.status)
	})
	return size, err
}

// ReadObject implements zarr.ObjectReader: one GET of the whole object
// (retried as ReadRanges says). An object larger than limit is an error
// wrapping zarr.ErrTooLarge.
func (s *Store) ReadObject(key string, limit int64) ([]byte, error) {
	var b []byte
	err := s.do(s.o.ctx, http.MethodGet, key, func() string { return "" }, func(r *response) (bool, error) {
		if r.status != http.StatusOK {
			return false, fmt.Errorf("unexpected status %d", r.status)
		}
		if r.length > limit {
			return false, fmt.Errorf("object of %d bytes exceeds the limit of %d: %w", r.length, limit, zarr.ErrTooLarge)
		}
		var err error
		b, err = io.ReadAll(io.LimitReader(r.body, min(limit, math.MaxInt64-1)+1)) // one byte past the limit tells it was exceeded
		switch {
		case err != nil:
			return true, err
		case int64(len(b)) > limit:
			return false, fmt.Errorf("object exceeds the limit of %d bytes: %w", limit, zarr.ErrTooLarge)
		case r.length >= 0 && int64(len(b)) != r.length:
			return true, io.ErrUnexpectedEOF
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ReadTail implements zarr.TailReader: one suffix-range GET (bytes=-N),
// whose Content-Range also gives the object's size. A server that refuses
// suffix ranges (416) or ignores them (200 with a large body) is asked
// with a HEAD and an absolute range instead, from then on.
func (s *Store) ReadTail(key string, p []byte) (int64, error) {
	ctx := s.o.ctx
	n := int64(len(p))
	if n == 0 {
		return s.size(ctx, key)
	}
	if !s.noSuffix.Load() {
		size, err := s.readSuffix(ctx, key, p)
		if !errors.Is(err, errNoSuffix) {
			return size, err
		}
		s.noSuffix.Store(true)
		if size >= 0 {
			return size, s.readTailAt(ctx, key, p, size)
		}
	}
	size, err := s.size(ctx, key)
	if err != nil {
		return 0, err
	}
	return size, s.readTailAt(ctx, key, p, size)
}

// readTailAt reads the last len(p) bytes of an object of size bytes with
// an absolute range; a shorter object reads nothing.
func (s *Store) readTailAt(ctx context.Context, key string, p []byte, size int64) error {
	if size < int64(len(p)) {
		return nil
	}
	err := s.get(ctx, key, newSink([]Range{{Off: size - int64(len(p)), Buf: p}}))
	var short *shortObject
	if errors.As(err, &short) {
		return fmt.Errorf("remote: GET %s: the object shrank from %d to %d bytes while being read", s.URI(key), size, short.size)
	}
	return err
}

// errNoSuffix means the server does not serve suffix ranges; readSuffix
// returns it with the object's size when the response told it, else -1.
var errNoSuffix = errors.New("suffix ranges not served")

// suffixBodyLimit is how much of a whole-object answer to a suffix range
// is read through rather than asked again with an absolute range.
const suffixBodyLimit = 1 << 20

func (s *Store) readSuffix(ctx context.Context, key string, p []byte) (int64, error) {
	n := int64(len(p))
	var size int64 = -1
	refused := false
	err := s.do(ctx, http.MethodGet, key, func() string { return "bytes=-" + strconv.FormatInt(n, 10) }, func(r *response) (bool, error) {
		switch r.status {
		case http.StatusPartialContent:
			cr, ok := parseContentRange(r.header.Get("Content-Range"))
			if ok && cr.total == 0 {
				size = 0
				return false, nil
			}
			if !ok || cr.total < 0 || cr.last != cr.total-1 || cr.last-cr.first+1 != min(n, cr.total) {
				return false, fmt.Errorf("a suffix range of %d bytes answered with Content-Range %q", n, r.header.Get("Content-Range"))
			}
			size = cr.total
			if cr.total < n {
				return false, nil // shorter than its tail: the caller sees size < len(p)
			}
			if _, err := io.ReadFull(r.body, p); err != nil {
				return true, err
			}
			return false, nil
		case http.StatusOK:
			// The whole object: the server ignored the range.
			refused = true
			if r.length >= 0 {
				size = r.length
				if r.length > n+suffixBodyLimit {
					return false, nil // ask again with an absolute range
				}
			}
			b, err := io.ReadAll(io.LimitReader(r.body, n+suffixBodyLimit+1))
			if err != nil {
				return true, err
			}
			if int64(len(b)) > n+suffixBodyLimit || (r.length >= 0 && int64(len(b)) != r.length) {
				return true, fmt.Errorf("body of %d bytes, Content-Length %d", len(b), r.length)
			}
			refused = false
			size = int64(len(b))
			if size >= n {
				copy(p, b[size-n:])
			}
			return false, nil
		case http.StatusRequestedRangeNotSatisfiable:
			// Refused; or the object is empty.
			refused = true
			if cr, ok := parseContentRange(r.header.Get("Content-Range")); ok && cr.total >= 0 {
				size = cr.total
				if size == 0 {
					refused = false
				}
			}
			return false, nil
		}
		return false, fmt.Errorf("unexpected status %d", r.status)
	})
	if err == nil && refused {
		return size, errNoSuffix
	}
	return size, err
}

// shortObject is a read that found the object ending before the range it
// asked for.
type shortObject struct{ size int64 }

func (e *shortObject) Error() string { return fmt.Sprintf("object of %d bytes", e.size) }

// get reads the sink's span of the object key, resuming where an attempt
// stopped.
func (s *Store) get(ctx context.Context, key string, k *sink) error {
	k.scratch = &s.o.scratch
	return s.do(ctx, http.MethodGet, key, k.rangeHeader, func(r *response) (bool, error) {
		switch r.status {
		case http.StatusPartialContent:
			cr, ok := parseContentRange(r.header.Get("Content-Range"))
			if ok && cr.total == 0 {
				return false, &shortObject{size: 0}
			}
			if !ok || cr.first != k.pos || cr.last < cr.first {
				// Never read a range other than the one asked for.
				return false, fmt.Errorf("asked for %s, got Content-Range %q", k.rangeHeader(), r.header.Get("Content-Range"))
			}
			limit := min(k.end, cr.last+1)
			if err := k.consume(r.body, limit); err != nil {
				return true, err
			}
			if limit < k.end {
				if cr.total >= 0 && cr.last+1 >= cr.total {
					return false, &shortObject{size: cr.total}
				}
				return true, nil // a shorter range than asked for: ask for the rest
			}
			return false, nil
		case http.StatusOK:
			// The whole object, from byte 0: the server ignored the range.
			// Skip to the range; never take the body for it. A body of
			// unknown length ends where the object does.
			body := &eofReader{r: r.body}
			n, err := io.CopyN(io.Discard, body, k.pos)
			if err != nil {
				if body.eof {
					return false, &shortObject{size: n}
				}
				return true, err
			}
			limit := k.end
			if r.length >= 0 && r.length < limit {
				limit = max(r.length, k.pos)
			}
			if err := k.consume(body, limit); err != nil {
				if body.eof && r.length < 0 {
					return false, &shortObject{size: k.pos}
				}
				return true, err
			}
			if limit < k.end {
				return false, &shortObject{size: r.length}
			}
			return false, nil
		case http.StatusRequestedRangeNotSatisfiable:
			size := k.pos
			if cr, ok := parseContentRange(r.header.Get("Content-Range")); ok && cr.total >= 0 {
				size = cr.total
			}
			return false, &shortObject{size: size}
		}
		return false, fmt.Errorf("unexpected status %d", r.status)
	})
}

// eofReader records whether its reader ended cleanly (io.EOF), as a body
// of unknown length does at the object's end; net/http reports a body
// shorter than its Content-Length as io.ErrUnexpectedEOF instead.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

// do runs one logical request: attempts until handle is satisfied, a
// failure is not worth retrying, or Options.Attempts are spent. handle is
// called with each 2xx or 416 response, consumes it, and reports whether
// to try again (a body cut short) and the error. Other statuses are
// retried when the service says it is busy or failing (5xx, 408, 429,
// SlowDown) and returned as an *Error otherwise.
func (s *Store) do(ctx context.Context, method, key string, rng func() string, handle func(*response) (again bool, err error)) error {
	var err error
	for attempt := 1; ; attempt++ {
		var again bool
		again, err = s.once(ctx, method, key, rng(), handle)
		if !again {
			return annotate(err, attempt)
		}
		if attempt >= s.o.opts.Attempts {
			break
		}
		s.o.retries.Add(1)
		if werr := sleep(ctx, s.o.backoff(attempt)); werr != nil {
			return &Error{Method: method, URI: s.URI(key), Attempts: attempt, Err: werr}
		}
	}
	if err == nil {
		err = errors.New("the server kept answering with less than asked for")
	}
	return annotate(err, s.o.opts.Attempts)
}

func annotate(err error, attempts int) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e.Attempts == 0 {
		e.Attempts = attempts
	}
	return err
}

// backoff returns the wait before retry k (1 for the first): full jitter
// over an exponentially growing interval.
func (o *Opener) backoff(k int) time.Duration {
	d := o.opts.Backoff << min(k-1, 6) // at most backoffCap (64) times the base
	return rand.N(d) + 1
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// once sends one attempt under the concurrency bound, the connect timeout
// and the response timeout.
func (s *Store) once(ctx context.Context, method, key, rng string, handle func(*response) (bool, error)) (again bool, err error) {
	fail := func(err error) *Error { return &Error{Method: method, URI: s.URI(key), Err: err} }
	if s.o.ctx.Err() != nil {
		return false, fail(errClosed)
	}
	select {
	case s.o.sem <- struct{}{}:
	case <-ctx.Done():
		return false, fail(ctx.Err())
	case <-s.o.ctx.Done():
		return false, fail(errClosed)
	}
	defer func() { <-s.o.sem }()
	a := s.o.newAttempt(ctx)
	defer a.stop()
	s.o.requests.Add(1)
	r, err := s.be.do(a.ctx, method, key, rng)
	if err != nil {
		return s.transportFailure(a, method, key, err)
	}
	defer r.body.Close()
	if r.status/100 == 2 || r.status == http.StatusRequestedRangeNotSatisfiable {
		again, err := handle(r)
		var short *shortObject
		switch {
		case err == nil, errors.As(err, &short):
			return again, err
		case again:
			return s.transportFailure(a, method, key, err)
		}
		return false, &Error{Method: method, URI: s.URI(key), Status: r.status, Err: err}
	}
	return retryableStatus(r.status, r.code), s.statusError(method, key, r)
}

// retryableStatus reports whether a failed status is worth another
// attempt: the service is busy, throttling or failing, or the request
// timed out on its side.
func retryableStatus(status int, code string) bool {
	switch code {
	case "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "ThrottlingException", "RequestLimitExceeded":
		return true
	}
	return status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests
}
