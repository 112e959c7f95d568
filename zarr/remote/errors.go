package remote

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/damacy-go/damacy/zarr"
)

// ErrNoBucket is matched by the *Error of a request whose bucket does not
// exist (S3's and GCS's NoSuchBucket). Such an error also matches
// zarr.ErrNotFound, not fs.ErrNotExist: a missing bucket is not a missing
// chunk to read as the fill value.
var ErrNoBucket = errors.New("bucket does not exist")

// errClosed is the cause of requests made after Opener.Close.
var errClosed = errors.New("opener closed")

// Error is a request that failed: the method, the object's URI, the HTTP
// status (0 when no response came), the service's error code, the number
// of attempts made, and the cause, which says what went wrong in words
// that name the server (a refused connection, an unknown host, an
// untrusted certificate, which timeout passed) or, for a refusal, what
// the request was sent with. A 404 matches fs.ErrNotExist, except a
// missing bucket, which matches ErrNoBucket and zarr.ErrNotFound; a 401 or
// 403 matches fs.ErrPermission.
type Error struct {
	Method   string
	URI      string
	Status   int
	Code     string
	Attempts int
	Err      error
}

// Error returns "remote: METHOD URI: STATUS (CODE): CAUSE (after N
// attempts)", each part when known, with every URL's secrets masked (see
// Redact).
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "remote: %s %s: ", e.Method, e.URI)
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d %s", e.Status, http.StatusText(e.Status))
		if e.Code != "" {
			fmt.Fprintf(&b, " (%s)", e.Code)
		}
	}
	if e.Err != nil {
		if e.Status != 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Err.Error())
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return Redact(b.String())
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches fs.ErrNotExist for a 404 of a missing object, ErrNoBucket and
// zarr.ErrNotFound for a missing bucket, and fs.ErrPermission for a 401
// or 403.
func (e *Error) Is(target error) bool {
	noBucket := e.Status == http.StatusNotFound && e.Code == "NoSuchBucket"
	switch target {
	case fs.ErrNotExist:
		return e.Status == http.StatusNotFound && !noBucket
	case ErrNoBucket, zarr.ErrNotFound:
		return noBucket
	case fs.ErrPermission:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	}
	return false
}

// server names who answers a store's requests, for messages: "the S3
// endpoint 127.0.0.1:9000 (from DAMACY_S3_ENDPOINT)", "example.com:443".
type server struct {
	role     string // "S3 endpoint", "GCS endpoint"; "" for a web server
	hostport string
	source   string // the setting that chose the endpoint, if not the default
}

func (v server) String() string {
	s := v.hostport
	if v.role != "" {
		s = "the " + v.role + " " + s
	}
	if v.source != "" {
		s += " (from " + v.source + ")"
	}
	return s
}

// hostPort returns u's host and port, the scheme's default port when u
// names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "443"
	if strings.EqualFold(u.Scheme, "http") {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// statusError is the *Error of a response with a failed status: the
// service's message, said more plainly for a missing bucket, and, for a
// refusal (401, 403), with what the request carried and what to check.
func (s *Store) statusError(method, key string, r *response) *Error {
	e := &Error{Method: method, URI: s.URI(key), Status: r.status, Code: r.code}
	msg := r.msg
	switch {
	case r.status == http.StatusNotFound && r.code == "NoSuchBucket":
		msg = fmt.Sprintf("the bucket %q does not exist at %s", s.be.bucket(), s.be.server())
	case r.status == http.StatusUnauthorized || r.status == http.StatusForbidden:
		if hint := s.be.denied(key, r.code); hint != "" {
			msg = strings.TrimPrefix(strings.TrimSuffix(msg, ".")+"; "+hint, "; ")
		}
	}
	if msg != "" {
		e.Err = errors.New(msg)
	}
	return e
}

// deniedHTTP is the hint of a web server's refusal: a presigned URL
// (one with a query) may have expired.
func deniedHTTP(base *url.URL) string {
	if base.RawQuery != "" {
		return "if the URL is presigned, its signature may have expired or be for another object or method"
	}
	return ""
}
