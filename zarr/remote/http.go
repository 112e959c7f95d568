package remote

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"golang.org/x/oauth2"
)

// requester sends the GET and HEAD requests of every scheme through one
// HTTP client: an object's URL is a fixed prefix, its key escaped, and a
// fixed query; an authorizer, when set, adds the credentials (S3's
// signature, GCS's token). Its fields are set once, before use.
type requester struct {
	client *http.Client
	prefix string // scheme://[userinfo@]host, the escaped base path, then "/"
	pathAt int    // where prefix's path begins
	query  string // "?" and the query of every request, or ""
	// s3Keys escapes keys as S3 wants them (and signs them): everything
	// but unreserved characters and "/". Otherwise a key's segments are
	// escaped as url.PathEscape does.
	s3Keys bool
	// identity asks for the stored bytes (Accept-Encoding: identity), for
	// a client of the caller's, which might otherwise ask for gzip.
	identity bool
	auth     authorizer // nil: none
}

// authorizer adds credentials to a request.
type authorizer interface {
	// authorize adds credentials to req, whose URL's path, escaped as it
	// is sent, is path.
	authorize(req *http.Request, path string) error
}

// newRequester returns a requester for the objects below origin
// (scheme://[userinfo@]host) and the escaped path base; query, if not
// empty, starts with "?".
func newRequester(client *http.Client, origin, base, query string) requester {
	base = strings.TrimSuffix(base, "/")
	return requester{client: client, prefix: origin + base + "/", pathAt: len(origin), query: query}
}

// requesterFor returns a requester for the objects below base, a URL
// whose path is a prefix of every key and whose query every request
// carries.
func requesterFor(client *http.Client, base *url.URL) requester {
	origin := (&url.URL{Scheme: base.Scheme, User: base.User, Host: base.Host}).String()
	query := ""
	if base.ForceQuery || base.RawQuery != "" {
		query = "?" + base.RawQuery
	}
	return newRequester(client, origin, base.EscapedPath(), query)
}

// send sends one request, method GET or HEAD, for the object key, with
// the Range header rng unless it is "".
func (q *requester) send(ctx context.Context, method, key, rng string) (*http.Response, error) {
	req, path, err := q.request(ctx, method, key, rng)
	if err != nil {
		return nil, err
	}
	if q.auth != nil {
		if err := q.auth.authorize(req, path); err != nil {
			return nil, err
		}
	}
	return q.client.Do(req)
}

// request returns the request send sends, before its credentials, and
// its URL's path as sent.
func (q *requester) request(ctx context.Context, method, key, rng string) (*http.Request, string, error) {
	u := q.prefix + escapeKey(key, q.s3Keys) + q.query
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, "", err
	}
	if rng != "" || q.identity {
		v := make([]string, 2) // one allocation for both values
		if rng != "" {
			v[0] = rng
			req.Header["Range"] = v[0:1:1]
		}
		if q.identity {
			v[1] = "identity"
			req.Header["Accept-Encoding"] = v[1:2:2]
		}
	}
	return req, u[q.pathAt : len(u)-len(q.query)], nil
}

// escapeKey returns key escaped for a URL's path, segment by segment: as
// url.PathEscape escapes each, or, for s3, everything but the unreserved
// characters of RFC 3986 (letters, digits, "-", ".", "_", "~"), as S3's
// signatures want it. A key with nothing to escape is returned as it is.
func escapeKey(key string, s3 bool) string {
	n := 0
	for i := 0; i < len(key); i++ {
		if keyByteEscaped(key[i], s3) {
			n++
		}
	}
	if n == 0 {
		return key
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(key)+2*n)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keyByteEscaped(c, s3) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// keyByteEscaped reports whether escapeKey escapes c.
func keyByteEscaped(c byte, s3 bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return false
	}
	switch c {
	case '-', '_', '.', '~', '/':
		return false
	case '$', '&', '+', ':', '=', '@': // reserved, but not in a path segment
		return s3
	}
	return true
}

// tokenAuth puts an OAuth2 bearer token on each request (GCS).
type tokenAuth struct{ tokens oauth2.TokenSource }

func (t tokenAuth) authorize(req *http.Request, _ string) error {
	tok, err := t.tokens.Token()
	if err != nil {
		return &tokenError{what: "a GCS access token", err: err}
	}
	tok.SetAuthHeader(req)
	return nil
}

// httpBackend reads objects with plain HTTP requests: http(s):// stores,
// and gs:// stores through GCS's XML API (with an OAuth2 token source
// unless anonymous).
type httpBackend struct {
	requester
	base       *url.URL // scheme, host, user info and query of every request; the path is the prefix
	name       string   // the root's URI, for messages
	gcs        *gcsAuth // for gs://: the endpoint's source and the credentials; nil for http(s)://
	bucketName string
	tokens     oauth2.TokenSource
}

// newHTTPBackend returns a backend for the objects below base, an
// http(s):// store named in messages by the base URL without its query
// and with its password masked.
func newHTTPBackend(client *http.Client, base *url.URL) *httpBackend {
	u := *base
	u.RawQuery = ""
	return &httpBackend{requester: requesterFor(client, base), base: base, name: strings.TrimSuffix(Redact(u.String()), "/")}
}

func (b *httpBackend) uri(key string) string { return b.name + "/" + key }

func (b *httpBackend) bucket() string { return b.bucketName }

func (b *httpBackend) server() server {
	v := server{hostport: hostPort(b.base)}
	if b.gcs != nil {
		v.role, v.source = "GCS endpoint", b.gcs.source
	}
	return v
}

func (b *httpBackend) denied(key, code string) string {
	if b.gcs == nil {
		return deniedHTTP(b.base)
	}
	if b.tokens == nil {
		return b.gcs.anonymous + fmt.Sprintf("; the bucket %q may not allow anonymous reads of %q", b.bucketName, key)
	}
	return fmt.Sprintf("sent with a token for %s: check that it may read (storage.objects.get) object %q of bucket %q", b.gcs.creds, key, b.bucketName)
}

func (b *httpBackend) endpoint() string {
	return (&url.URL{Scheme: b.base.Scheme, Host: b.base.Host}).String()
}

func (b *httpBackend) do(ctx context.Context, method, key, rng string) (*response, error) {
	resp, err := b.send(ctx, method, key, rng)
	if err != nil {
		return nil, err
	}
	r := &response{status: resp.StatusCode, header: resp.Header, length: resp.ContentLength, body: resp.Body}
	if failed(resp) {
		// The error document, if any: S3 and GCS send XML with a Code and a
		// Message. Read a little of it, so the connection can be reused.
		doc, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		r.code, r.msg = xmlField(doc, "Code"), xmlField(doc, "Message")
	}
	return r, nil
}

// failed reports whether resp is a failure that may carry an error
// document: not a success, nor a 416, which Store reads as an answer.
func failed(resp *http.Response) bool {
	return resp.StatusCode >= 300 && resp.StatusCode != http.StatusRequestedRangeNotSatisfiable
}

var xmlFields = map[string]*regexp.Regexp{
	"Code":    regexp.MustCompile(`<Code>([^<]{1,200})</Code>`),
	"Message": regexp.MustCompile(`<Message>([^<]{1,500})</Message>`),
}

func xmlField(doc []byte, name string) string {
	if m := xmlFields[name].FindSubmatch(doc); m != nil {
		return string(m[1])
	}
	return ""
}
