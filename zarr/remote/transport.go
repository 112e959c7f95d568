package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/oauth2"
)

// errConnectTimeout ends an attempt that had no connection ready (TCP
// and TLS) within Options.ConnectTimeout. It is a deadline passing.
var errConnectTimeout = fmt.Errorf("connect timeout: %w", context.DeadlineExceeded)

// attempt is one try of a request: its context, which ends at the
// response timeout (Options.Timeout) or, while no connection is ready, at
// the connect timeout; and how far the request got, from the HTTP
// client's trace, so that a timeout can say which one passed.
type attempt struct {
	ctx       context.Context // the request's
	caller    context.Context // the caller's: its end is final
	deadline  context.Context // ends at the response timeout
	connected atomic.Bool     // a connection was ready (TCP, and TLS for https)
	responded atomic.Bool     // the response's first byte came
	stop      func()
}

// newAttempt starts an attempt under ctx; its stop must be called.
func (o *Opener) newAttempt(ctx context.Context) *attempt {
	a := &attempt{caller: ctx}
	dctx, cancelDeadline := context.WithTimeout(ctx, o.opts.Timeout)
	cctx, cancel := context.WithCancelCause(dctx)
	a.deadline = dctx
	var timer *time.Timer
	if ct := o.opts.ConnectTimeout; ct < o.opts.Timeout {
		timer = time.AfterFunc(ct, func() {
			if !a.connected.Load() {
				cancel(errConnectTimeout)
			}
		})
	}
	a.ctx = httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { a.connected.Store(true) },
		GotFirstResponseByte: func() { a.responded.Store(true) },
	})
	a.stop = func() {
		if timer != nil {
			timer.Stop()
		}
		cancel(nil)
		cancelDeadline()
	}
	return a
}

// netError is a failure that left no complete response, described: what
// happened, and to which server. It unwraps to the client's error.
type netError struct {
	msg string
	err error
}

func (e *netError) Error() string { return e.msg }

func (e *netError) Unwrap() error { return e.err }

// tokenError is a failure to get the credentials a request needs: a GCS
// OAuth2 token, AWS credentials.
type tokenError struct {
	what string // "a GCS access token"
	err  error
}

func (e *tokenError) Error() string { return "cannot get " + e.what + ": " + e.err.Error() }

func (e *tokenError) Unwrap() error { return e.err }

// transportFailure classifies an error without a (complete) response:
// the caller's context ending is final; timeouts, refused and reset
// connections, bodies cut short and other network failures are retried;
// certificate failures, an HTTP server where TLS was expected and an
// unknown host are not.
func (s *Store) transportFailure(a *attempt, method, key string, err error) (bool, error) {
	e := &Error{Method: method, URI: s.URI(key)}
	if a.caller.Err() != nil {
		e.Err = a.caller.Err()
		if s.o.ctx.Err() != nil {
			e.Err = errClosed
		}
		return false, e
	}
	var retry bool
	e.Err, retry = describe(s.be.server(), s.o.opts, a, err)
	return retry, e
}

// describe says what err, a failure of attempt a on srv, means; and
// whether it is worth another attempt.
func describe(srv server, opts Options, a *attempt, err error) (error, bool) {
	say := func(retry bool, format string, args ...any) (error, bool) {
		return &netError{msg: fmt.Sprintf(format, args...), err: err}, retry
	}
	if a != nil {
		switch {
		case context.Cause(a.ctx) == errConnectTimeout:
			err = errConnectTimeout // not the client's context.Canceled
			return say(true, "no connection to %s within the connect timeout of %v", srv, opts.ConnectTimeout)
		case a.deadline.Err() != nil && !a.connected.Load():
			return say(true, "no connection to %s within the timeout of %v", srv, opts.Timeout)
		case a.deadline.Err() != nil && !a.responded.Load():
			return say(true, "%s sent no response within the response timeout of %v", srv, opts.Timeout)
		case a.deadline.Err() != nil:
			return say(true, "the response from %s stalled: its body did not arrive within the response timeout of %v", srv, opts.Timeout)
		}
	}
	var tok *tokenError
	if errors.As(err, &tok) {
		var re *oauth2.RetrieveError
		return tok, !errors.As(err, &re)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		host, _, _ := net.SplitHostPort(srv.hostport)
		what := "host " + dns.Name
		switch {
		case srv.role != "" && host == dns.Name:
			what = "the host of " + srv.String()
		case srv.role != "":
			what = fmt.Sprintf("host %s of %s", dns.Name, srv)
		}
		return say(!dns.IsNotFound, "cannot resolve %s: %s", what, dns.Err)
	}
	var unknown x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown):
		return say(false, "TLS: the certificate of %s is signed by an unknown authority (%v); a private CA's certificate can be trusted with SSL_CERT_FILE", srv, unknown)
	case errors.As(err, &badHost):
		return say(false, "TLS: the certificate of %s is not valid for that name: %v", srv, badHost)
	case errors.As(err, &invalid):
		return say(false, "TLS: the certificate of %s is not valid: %v", srv, invalid)
	case errors.As(err, &verify):
		return say(false, "TLS: the certificate of %s failed verification: %v", srv, verify.Err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return say(false, "%s answered in plain HTTP, not TLS: use an http:// URL", srv)
	case errors.Is(err, syscall.ECONNREFUSED):
		return say(true, "%s refused the connection", srv)
	case errors.Is(err, syscall.ECONNRESET):
		return say(true, "%s reset the connection", srv)
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return say(true, "cannot reach %s: %v", srv, cause(err))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return say(true, "the response from %s ended early (%v)", srv, io.ErrUnexpectedEOF)
	case errors.Is(err, io.EOF):
		return say(true, "%s closed the connection without answering", srv)
	}
	var tlsAlert tls.AlertError
	var tlsRecord tls.RecordHeaderError
	if errors.As(err, &tlsAlert) || errors.As(err, &tlsRecord) || strings.Contains(err.Error(), "tls: ") {
		return say(true, "TLS handshake with %s failed: %v", srv, cause(err))
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return say(true, "%s: %v", srv, cause(err))
	}
	return say(true, "%v", cause(err))
}

// cause is the text of err without the request line an HTTP client's
// *url.Error puts first (Get "URL": ...), which the *Error around it says
// in its own words.
func cause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
