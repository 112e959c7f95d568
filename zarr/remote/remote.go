// Package remote reads zarr hierarchies from object stores and web
// servers: s3:// (Amazon S3 and S3-compatible servers such as MinIO, Ceph
// or R2), gs:// (Google Cloud Storage, through its XML API) and http:// or
// https:// (any server that answers ranged GETs). Each is a zarr.Store
// whose reads are ranged GET requests; an Opener resolves URIs (and local
// paths, and file:// URIs) to stores.
//
// All three schemes share one request layer: a bound on the requests in
// flight over every store of an Opener, a connect timeout and a response
// timeout per attempt (the body included), retries with exponential
// backoff and full jitter on 5xx, 429, S3's SlowDown, timeouts, refused
// and reset connections and bodies cut short (a retry asks only for the
// bytes still missing), and checks that a response is the range asked
// for: a server that answers a ranged GET with 200 and the whole object
// is read past the bytes before the range, never taken as the range; one
// that refuses a suffix range gets a HEAD and an absolute range.
//
// A missing object (404) reads as absent (fs.ErrNotExist), so a missing
// shard or chunk reads as the fill value, as for local files; a missing
// bucket (NoSuchBucket) does not: it is an error matching ErrNoBucket and
// zarr.ErrNotFound. Every other failure is an *Error naming the object's
// URI and saying the cause in words that name the server by host:port (a
// refused connection, an unknown host, an untrusted certificate, which
// timeout passed and its limit) and, for a 401 or 403 (which match
// fs.ErrPermission and are never retried), what the request carried and
// what to check. A URL's query values and password are credentials (a
// presigned URL's signature, a token): no message shows them (Redact).
//
// The tests run against MinIO (s3://) and fake-gcs-server (gs://), built
// from their pinned modules by package remotetest, and against fault
// servers for what those do not produce: the emulator checks no
// credentials, never throttles or fails, and answers a missing bucket with
// a bare 404 where GCS sends NoSuchBucket (gcs_test.go lists the gaps).
package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/zarr"
)

// Defaults of Options' fields; a zero field means the value here.
const (
	DefaultConcurrency    = 64
	DefaultTimeout        = 60 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	DefaultAttempts       = 6
	DefaultBackoff        = 100 * time.Millisecond
	// backoffCap is how far the backoff base doubles: the wait before a
	// retry is drawn uniformly from [0, min(Backoff·2^(k-1), backoffCap·Backoff)).
	backoffCap = 64
)

// Options configures an Opener. A zero field means its documented default.
type Options struct {
	// Concurrency bounds the requests in flight over all the Opener's
	// stores; it also sizes the pool of idle connections kept per host.
	// Default 64.
	Concurrency int
	// Timeout bounds one attempt of a request, from sending it to the last
	// byte of its body, connecting included: the response timeout.
	// Default 60 s.
	Timeout time.Duration
	// ConnectTimeout bounds the part of an attempt until a connection is
	// ready to carry it (TCP connect, and the TLS handshake for https); a
	// reused connection is ready at once. It is the only limit on
	// connecting of the default client (whose dialer and TLS handshake
	// have none of their own). Default 10 s; at most Timeout.
	ConnectTimeout time.Duration
	// Attempts is how many times a request is tried before its error is
	// returned; 1 means no retries. Default 6.
	Attempts int
	// Backoff is the base of the exponential backoff between attempts:
	// the wait before retry k is uniform in [0, Backoff·2^(k-1)) (full
	// jitter), the interval growing at most to 64·Backoff. Default 100 ms.
	Backoff time.Duration
	// HTTPClient, when set, carries every request (for example one that
	// trusts a test server's certificate). Default: a client whose
	// transport keeps Concurrency idle connections per host, speaks
	// HTTP/1.1 (parallel connections, not streams multiplexed onto one)
	// and never asks for compressed bodies (ranges are of stored bytes).
	HTTPClient *http.Client
	// S3 configures s3:// stores.
	S3 S3Options
	// GCS configures gs:// stores.
	GCS GCSOptions
}

// S3Options configures s3:// stores. Credentials come from the AWS SDK's
// standard chain (environment, shared config and credentials files with
// AWS_PROFILE, web identity, SSO, container and instance metadata) unless
// given here.
type S3Options struct {
	// Endpoint is the URL of an S3-compatible server (MinIO, Ceph, R2),
	// addressed path-style (http://host:port/bucket/key). Default: the
	// environment's DAMACY_S3_ENDPOINT, AWS_ENDPOINT_URL_S3 or
	// AWS_ENDPOINT_URL, in that order; none means AWS itself,
	// virtual-hosted style.
	Endpoint string
	// Region signs the requests. Default: the SDK's (AWS_REGION, the
	// profile's region), else us-east-1.
	Region string
	// AccessKeyID and SecretAccessKey, when both set, are the credentials,
	// instead of the standard chain.
	AccessKeyID, SecretAccessKey string
	// Anonymous sends unsigned requests, as public buckets accept. Also
	// set by DAMACY_S3_ANONYMOUS=1, and taken when the standard chain
	// finds no credentials at all.
	Anonymous bool
}

// GCSOptions configures gs:// stores. Credentials come from Google's
// application default credentials (GOOGLE_APPLICATION_CREDENTIALS naming a
// service-account key file, gcloud's user credentials, the metadata server
// on Google Cloud) unless given here.
type GCSOptions struct {
	// Endpoint is the XML API's base URL. Default: DAMACY_GCS_ENDPOINT,
	// else http://$STORAGE_EMULATOR_HOST when that is set (emulators), else
	// https://storage.googleapis.com.
	Endpoint string
	// CredentialsFile is a service-account key file (JSON) to use instead
	// of the application default credentials.
	CredentialsFile string
	// Anonymous sends requests without credentials, as public buckets
	// accept. Also set by DAMACY_GCS_ANONYMOUS=1, and taken when no
	// application default credentials are found.
	Anonymous bool
}

// Validate reports the first field of o that NewOpener would refuse.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Concurrency < 1 || o.Concurrency > 4096 {
		return o, fmt.Errorf("remote: Options.Concurrency = %d: must be in 1..4096", o.Concurrency)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("remote: Options.Timeout = %v: must be positive", o.Timeout)
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ConnectTimeout < 0 {
		return o, fmt.Errorf("remote: Options.ConnectTimeout = %v: must be positive", o.ConnectTimeout)
	}
	o.ConnectTimeout = min(o.ConnectTimeout, o.Timeout)
	if o.Attempts == 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Attempts < 1 || o.Attempts > 100 {
		return o, fmt.Errorf("remote: Options.Attempts = %d: must be in 1..100", o.Attempts)
	}
	if o.Backoff == 0 {
		o.Backoff = DefaultBackoff
	}
	if o.Backoff < 0 {
		return o, fmt.Errorf("remote: Options.Backoff = %v: must be positive", o.Backoff)
	}
	return o, nil
}

// Opener resolves URIs to stores and owns what its remote stores share:
// the HTTP connections, the S3 client and the GCS credentials, and the
// bound on requests in flight. It is safe for concurrent use.
type Opener struct {
	opts   Options
	client *http.Client
	own    bool          // client is ours: Close closes its idle connections
	sem    chan struct{} // one token per request in flight
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	stores map[string]*Store // by root ("s3://bucket", "https://host:port")
	s3     *s3Clients
	gcs    *gcsAuth
	idle   []*http.Transport // transports of our own besides client's, closed with it
	// scratch holds the buffers that the bytes between the ranges of a
	// GET are read into and dropped (see sink).
	scratch sync.Pool

	requests, retries atomic.Int64
}

// NewOpener returns an Opener configured by opts (see Options for the
// defaults). Clients and credentials are set up at the first Open of each
// scheme.
func NewOpener(opts Options) (*Opener, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &Opener{opts: opts, client: opts.HTTPClient, sem: make(chan struct{}, opts.Concurrency), stores: map[string]*Store{}}
	if o.client == nil {
		o.client, o.own = newHTTPClient(opts.Concurrency), true
	}
	o.scratch.New = func() any { b := make([]byte, scratchSize); return &b }
	o.ctx, o.cancel = context.WithCancel(context.Background())
	return o, nil
}

// newHTTPClient returns a client for concurrency requests in flight: that
// many idle connections kept per host (Go's default is 2, which would open
// a new TCP and TLS connection for most requests), HTTP/1.1, no
// transparent decompression, and plain-HTTP body reads that wake for their
// bytes (lowWater).
func newHTTPClient(concurrency int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tuneTransport(tr, concurrency)
	return &http.Client{Transport: tr}
}

func tuneTransport(tr *http.Transport, concurrency int) {
	tr.MaxIdleConns = 0 // no limit over all hosts
	tr.MaxIdleConnsPerHost = concurrency
	tr.DisableCompression = true
	tr.ForceAttemptHTTP2 = false
	// Options.ConnectTimeout is the one limit on connecting, so that a
	// message can name it.
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return lowWater(c), nil
	}
	tr.TLSHandshakeTimeout = 0
}

// Close aborts the requests of calls without a context (ReadAt, Size,
// ReadTail) and releases idle connections. Stores of a closed Opener fail
// every later request. Close is idempotent.
func (o *Opener) Close() error {
	o.cancel()
	if o.own {
		o.client.CloseIdleConnections()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, tr := range o.idle {
		tr.CloseIdleConnections()
	}
	return nil
}

// Stats are an Opener's request counters.
type Stats struct {
	Requests int64 // requests sent (GET and HEAD), retries included
	Retries  int64 // of which retries of a failed attempt
}

// Stats returns the Opener's counters since NewOpener.
func (o *Opener) Stats() Stats {
	return Stats{Requests: o.requests.Load(), Retries: o.retries.Load()}
}

// Concurrency returns the bound on requests in flight.
func (o *Opener) Concurrency() int { return o.opts.Concurrency }

// IsURI reports whether s is a URI (scheme://...) rather than a local path.
func IsURI(s string) bool { return uriScheme.MatchString(s) }

var uriScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// Open resolves uri to a store and the path of its node within it:
//
//   - s3://bucket/prefix: the bucket, path "prefix";
//   - gs://bucket/prefix: the bucket, path "prefix";
//   - http://host[:port]/path and https://...: the server, path "path"
//     (a query string, such as a signature, is sent with every request);
//   - file:///path and plain local paths: a *zarr.DirStore rooted at the
//     path, path "" (a missing directory is zarr.ErrNotFound).
//
// ctx bounds the setup of the scheme's client and credentials at the
// first Open of that scheme; the store's own requests do not use it.
func (o *Opener) Open(ctx context.Context, uri string) (zarr.Store, string, error) {
	if !IsURI(uri) {
		return openDir(uri)
	}
	u, err := url.Parse(uri)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URI, said (redacted) here
		}
		return nil, "", fmt.Errorf("remote: %s: %w", Redact(uri), err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "file" {
		if u.Host != "" && u.Host != "localhost" {
			return nil, "", fmt.Errorf("remote: %s: a file URI names a local path (file:///path), not host %q", Redact(uri), u.Host)
		}
		return openDir(u.Path)
	}
	if o.ctx.Err() != nil {
		return nil, "", fmt.Errorf("remote: %s: %w", Redact(uri), errClosed)
	}
	var root string
	var mk func() (backend, error)
	switch scheme {
	case "s3":
		if u.Host == "" {
			return nil, "", fmt.Errorf("remote: %s: no bucket (want s3://bucket/path)", Redact(uri))
		}
		bucket := u.Host
		root = "s3://" + bucket
		mk = func() (backend, error) { return o.newS3Backend(ctx, bucket) }
	case "gs":
		if u.Host == "" {
			return nil, "", fmt.Errorf("remote: %s: no bucket (want gs://bucket/path)", Redact(uri))
		}
		bucket := u.Host
		root = "gs://" + bucket
		mk = func() (backend, error) { return o.newGCSBackend(ctx, bucket) }
	case "http", "https":
		if u.Host == "" {
			return nil, "", fmt.Errorf("remote: %s: no host", Redact(uri))
		}
		base := &url.URL{Scheme: scheme, User: u.User, Host: u.Host, RawQuery: u.RawQuery}
		root = base.String()
		mk = func() (backend, error) { return newHTTPBackend(o.client, base), nil }
	default:
		return nil, "", fmt.Errorf("remote: %s: unsupported scheme %q (want s3, gs, http, https or file)", Redact(uri), u.Scheme)
	}
	path := strings.Trim(u.Path, "/")
	if path != "" {
		if zarr.ValidateKey(path) != nil {
			return nil, "", fmt.Errorf("remote: %s: %w: a path must have no empty, \".\" or \"..\" segments, backslashes or NUL bytes", Redact(uri), zarr.ErrInvalidKey)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.stores[root]; ok {
		return s, path, nil
	}
	be, err := mk()
	if err != nil {
		return nil, "", err
	}
	s := &Store{o: o, be: be}
	o.stores[root] = s
	return s, path, nil
}

// openDir opens a local directory as a store, path ""; a missing directory
// is zarr.ErrNotFound, as zarr.NewDirStore says.
func openDir(path string) (zarr.Store, string, error) {
	s, err := zarr.NewDirStore(filepath.FromSlash(path))
	if err != nil {
		return nil, "", err
	}
	return s, "", nil
}

// envFlag reports whether the environment variable name is set to a true
// value ("1", "true", "yes").
func envFlag(name string) bool {
	switch strings.ToLower(os.Getenv(name)) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// firstEnv returns the first non-empty of the environment variables
// names, and its name.
func firstEnv(names ...string) (value, name string) {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v, n
		}
	}
	return "", ""
}
