package remote_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// The failure tests read a zarr node as a new user's first command does
// (its zarr.json), and require the whole message: the cause in words, the
// server by host:port, the attempts; with a presigned query on every
// http(s):// URI, whose values must never appear.

// secret is the value of the credentials in the test URIs' queries.
const secret = "s3cr3t-SIGNATURE"

// presigned is a query such as a presigned URL carries.
const presigned = "?X-Amz-Credential=AKIA" + secret + "&X-Amz-Signature=" + secret + "&token=" + secret

// checkNoSecret fails t if text holds the secret of the test URIs.
func checkNoSecret(t testing.TB, what, text string) {
	t.Helper()
	if strings.Contains(text, secret) {
		t.Errorf("%s prints a secret: %q", what, text)
	}
}

// isolateAWS keeps the machine's AWS configuration out of a test.
func isolateAWS(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "DAMACY_S3_ENDPOINT", "DAMACY_S3_ANONYMOUS", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "DAMACY_GCS_ENDPOINT", "STORAGE_EMULATOR_HOST"} {
		t.Setenv(v, "")
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// openNode opens uri with opts and reads its zarr node, returning the
// error.
func openNode(t *testing.T, opts remote.Options, uri string) error {
	t.Helper()
	st, path, _ := openStore(t, opts, uri)
	_, err := zarr.InspectStore(st, path)
	if err == nil {
		t.Fatalf("reading %s succeeded", uri)
	}
	return err
}

// failure is a case of the failure tests: the message of reading uri's
// node must be want; errors.Is(err, is) must hold; attempts is the
// *Error's count.
type failure struct {
	name     string
	uri      string
	opts     remote.Options
	want     string
	is       error
	attempts int
}

func (f *failure) check(t *testing.T, names ...string) {
	t.Helper()
	err := openNode(t, f.opts, f.uri)
	if err.Error() != f.want {
		t.Errorf("message:\n got %s\nwant %s", err, f.want)
	}
	if f.is != nil && !errors.Is(err, f.is) {
		t.Errorf("errors.Is(%v, %v) = false", err, f.is)
	}
	var re *remote.Error
	if !errors.As(err, &re) || re.Attempts != f.attempts {
		t.Errorf("err = %#v, want an *Error after %d attempts", err, f.attempts)
	}
	zarrtest.CheckMessage(t, f.name, err, names...)
	checkNoSecret(t, f.name, err.Error())
}

func fastFailures() remote.Options {
	return remote.Options{Attempts: 3, Backoff: time.Millisecond, Timeout: 5 * time.Second}
}

// TestRefused: a closed port is named, with the attempts, for each scheme;
// for s3:// and gs:// with the setting that chose the endpoint.
func TestRefused(t *testing.T) {
	isolateAWS(t)
	leakCheck(t)
	addr := closedPort(t)
	s3opts, gsopts, env := fastFailures(), fastFailures(), fastFailures()
	s3opts.S3 = remote.S3Options{Endpoint: "http://" + addr, AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: secret}
	gsopts.GCS = remote.GCSOptions{Endpoint: "http://" + addr, Anonymous: true}
	env.S3 = remote.S3Options{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: secret}
	for _, f := range []failure{
		{name: "http", uri: "http://" + addr + "/x.zarr" + presigned, opts: fastFailures(),
			want: "remote: GET http://" + addr + "/x.zarr/zarr.json: " + addr + " refused the connection (after 3 attempts)"},
		{name: "s3", uri: "s3://bucket/x.zarr", opts: s3opts,
			want: "remote: GET s3://bucket/x.zarr/zarr.json: the S3 endpoint " + addr + " (from Options.S3.Endpoint) refused the connection (after 3 attempts)"},
		{name: "gs", uri: "gs://bkt/x.zarr", opts: gsopts,
			want: "remote: GET gs://bkt/x.zarr/zarr.json: the GCS endpoint " + addr + " (from Options.GCS.Endpoint) refused the connection (after 3 attempts)"},
		{name: "s3 from the environment", uri: "s3://bucket/x.zarr", opts: env,
			want: "remote: GET s3://bucket/x.zarr/zarr.json: the S3 endpoint " + addr + " (from DAMACY_S3_ENDPOINT) refused the connection (after 3 attempts)"},
	} {
		t.Run(f.name, func(t *testing.T) {
			if f.opts.S3.Endpoint == "" {
				t.Setenv("DAMACY_S3_ENDPOINT", "http://"+addr)
			}
			f.is, f.attempts = syscall.ECONNREFUSED, 3
			f.check(t, addr)
		})
	}
}

// TestUnknownHost: a name that does not resolve is named, and not tried
// again when the resolver says it does not exist.
func TestUnknownHost(t *testing.T) {
	isolateAWS(t)
	leakCheck(t)
	const host = "damacy-test.invalid"
	s3opts := fastFailures()
	s3opts.S3 = remote.S3Options{Endpoint: "http://" + host + ":9000", AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: secret}
	for _, f := range []failure{
		{name: "https", uri: "https://" + host + "/x.zarr" + presigned, opts: fastFailures(),
			want: "remote: GET https://" + host + "/x.zarr/zarr.json: cannot resolve host " + host + ": no such host"},
		{name: "s3", uri: "s3://bucket/x.zarr", opts: s3opts,
			want: "remote: GET s3://bucket/x.zarr/zarr.json: cannot resolve the host of the S3 endpoint " + host + ":9000 (from Options.S3.Endpoint): no such host"},
	} {
		t.Run(f.name, func(t *testing.T) {
			err := openNode(t, f.opts, f.uri)
			var dns *net.DNSError
			if !errors.As(err, &dns) {
				t.Fatalf("err = %v, want a *net.DNSError inside", err)
			}
			if !dns.IsNotFound {
				// No resolver here to say so: the cause is another one.
				if !strings.Contains(err.Error(), "cannot resolve") || !strings.Contains(err.Error(), host) {
					t.Errorf("message %q: want it to say that %s cannot be resolved", err, host)
				}
				t.Skipf("the resolver did not answer NXDOMAIN: %v", dns)
			}
			f.attempts = 1
			f.check(t)
		})
	}
}

// TestTLS: a certificate from an unknown authority, one for another name,
// and a plain HTTP server on an https:// URI each say so, naming the
// server, without retries.
func TestTLS(t *testing.T) {
	leakCheck(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
	tlsSrv := httptest.NewUnstartedServer(ok)
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewServer(ok)
	defer plain.Close()
	addr := tlsSrv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	trusting := fastFailures()
	trusting.HTTPClient = tlsSrv.Client()
	for _, f := range []failure{
		{name: "unknown authority", uri: tlsSrv.URL + "/x.zarr" + presigned, opts: fastFailures(),
			want: "remote: GET " + tlsSrv.URL + "/x.zarr/zarr.json: TLS: the certificate of " + addr + " is signed by an unknown authority (x509: certificate signed by unknown authority); a private CA's certificate can be trusted with SSL_CERT_FILE"},
		{name: "another name", uri: "https://localhost:" + port + "/x.zarr" + presigned, opts: trusting,
			want: "remote: GET https://localhost:" + port + "/x.zarr/zarr.json: TLS: the certificate of localhost:" + port + " is not valid for that name: x509: certificate is valid for example.com, *.example.com, not localhost"},
		{name: "plain HTTP", uri: "https://" + plain.Listener.Addr().String() + "/x.zarr" + presigned, opts: fastFailures(),
			want: "remote: GET https://" + plain.Listener.Addr().String() + "/x.zarr/zarr.json: " + plain.Listener.Addr().String() + " answered in plain HTTP, not TLS: use an http:// URL"},
	} {
		t.Run(f.name, func(t *testing.T) {
			f.attempts = 1
			f.check(t)
		})
	}
	tlsSrv.Client().CloseIdleConnections()
}

// TestTimeouts: which timeout passed, and its limit: the connect timeout
// (a TLS handshake that never ends), the response timeout before the
// response and while its body stalls.
func TestTimeouts(t *testing.T) {
	leakCheck(t)
	opts := remote.Options{Attempts: 2, Backoff: time.Millisecond, Timeout: 400 * time.Millisecond, ConnectTimeout: 100 * time.Millisecond}
	// A server that accepts connections and never says a word: a TLS
	// handshake with it never ends.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	dir, _ := testObjects(t)
	stall := remotetest.NewFaultServer(t, dir, false)
	stall.Inject(remotetest.Fault{Kind: remotetest.Stall, Path: "/d/zarr.json"})
	release := make(chan struct{})
	defer close(release)
	body := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("{"))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer body.Close()
	m, s, b := mute.Addr().String(), stall.Listener.Addr().String(), body.Listener.Addr().String()
	for _, f := range []failure{
		{name: "connect", uri: "https://" + m + "/x.zarr" + presigned,
			want: "remote: GET https://" + m + "/x.zarr/zarr.json: no connection to " + m + " within the connect timeout of 100ms (after 2 attempts)"},
		{name: "response", uri: stall.URL + "/d" + presigned,
			want: "remote: GET " + stall.URL + "/d/zarr.json: " + s + " sent no response within the response timeout of 400ms (after 2 attempts)"},
		{name: "body", uri: body.URL + "/x.zarr" + presigned,
			want: "remote: GET " + body.URL + "/x.zarr/zarr.json: the response from " + b + " stalled: its body did not arrive within the response timeout of 400ms (after 2 attempts)"},
	} {
		t.Run(f.name, func(t *testing.T) {
			f.opts, f.attempts, f.is = opts, 2, context.DeadlineExceeded
			t0 := time.Now()
			f.check(t)
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestRefusals: a 403 says what the request carried and what to check,
// here for the protocols' own bits (MinIO's refusals are in TestS3MinIO).
func TestRefusals(t *testing.T) {
	leakCheck(t)
	dir, _ := testObjects(t)
	srv := remotetest.NewFaultServer(t, dir, false)
	srv.Inject(remotetest.Fault{Kind: remotetest.Forbidden, Path: "/zarr.json"})
	gs := fastFailures()
	gs.GCS = remote.GCSOptions{Endpoint: srv.URL, Anonymous: true}
	for _, f := range []failure{
		{name: "presigned URL", uri: srv.URL + "/d" + presigned, opts: fastFailures(),
			want: "remote: GET " + srv.URL + "/d/zarr.json: 403 Forbidden (AccessDenied): injected 403; if the URL is presigned, its signature may have expired or be for another object or method"},
		{name: "gs anonymous", uri: "gs://d/x.zarr", opts: gs,
			want: "remote: GET gs://d/x.zarr/zarr.json: 403 Forbidden (AccessDenied): injected 403; the request carried no credentials (anonymous, as asked); the bucket \"d\" may not allow anonymous reads of \"x.zarr/zarr.json\""},
	} {
		t.Run(f.name, func(t *testing.T) {
			f.attempts, f.is = 1, fs.ErrPermission
			f.check(t)
		})
	}
}

// TestNoSuchBucket: GCS's XML API (as S3) tells a missing bucket from a
// missing object by its error code: the first is an error naming the
// bucket and the endpoint, matching zarr.ErrNotFound and
// remote.ErrNoBucket, read once; the second an absent object (fill), and
// a node with no metadata is "not found" naming the whole URI. The
// emulator of TestGCSEmulator answers both with a bare 404.
func TestNoSuchBucket(t *testing.T) {
	leakCheck(t)
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		code := "NoSuchKey"
		if strings.HasPrefix(r.URL.Path, "/nob/") {
			code = "NoSuchBucket"
		}
		w.Write([]byte("<?xml version='1.0' encoding='UTF-8'?><Error><Code>" + code + "</Code><Message>The specified bucket does not exist.</Message></Error>"))
	}))
	defer srv.Close()
	opts := fastFailures()
	opts.GCS = remote.GCSOptions{Endpoint: srv.URL, Anonymous: true}
	f := failure{name: "no bucket", uri: "gs://nob/x.zarr", opts: opts, is: remote.ErrNoBucket, attempts: 1,
		want: "remote: GET gs://nob/x.zarr/zarr.json: 404 Not Found (NoSuchBucket): the bucket \"nob\" does not exist at the GCS endpoint " + srv.Listener.Addr().String() + " (from Options.GCS.Endpoint)"}
	f.check(t, "gs://nob/x.zarr")
	err := openNode(t, opts, f.uri)
	if !errors.Is(err, zarr.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || requests != 2 {
		t.Errorf("a missing bucket: %v after %d requests; want zarr.ErrNotFound, not fs.ErrNotExist, after one request", err, requests/2)
	}
	err = openNode(t, opts, "gs://bkt/x.zarr")
	if want := "zarr: gs://bkt/x.zarr: not found: no zarr.json, .zarray or .zgroup"; err.Error() != want || !errors.Is(err, zarr.ErrNotFound) {
		t.Errorf("a missing node: %v; want %s", err, want)
	}
}
