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

// httpBackend reads objects with plain HTTP requests: http(s):// stores,
// and gs:// stores through GCS's XML API (with an OAuth2 token source
// unless anonymous).
type httpBackend struct {
	client     *http.Client
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
	return &httpBackend{client: client, base: base, name: strings.TrimSuffix(Redact(u.String()), "/")}
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

// objectURL returns the URL of key: the base's path, then the key with
// each segment escaped.
func (b *httpBackend) objectURL(key string) string {
	u := *b.base
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	u.RawPath = strings.TrimSuffix(b.base.EscapedPath(), "/") + "/" + strings.Join(segs, "/")
	u.Path, _ = url.PathUnescape(u.RawPath)
	return u.String()
}

func (b *httpBackend) do(ctx context.Context, method, key, rng string) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.objectURL(key), nil)
	if err != nil {
		return nil, err
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	if b.tokens != nil {
		tok, err := b.tokens.Token()
		if err != nil {
			return nil, &tokenError{err}
		}
		tok.SetAuthHeader(req)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	r := &response{status: resp.StatusCode, header: resp.Header, length: resp.ContentLength, body: resp.Body}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		// The error document, if any: S3 and GCS send XML with a Code and a
		// Message. Read a little of it, so the connection can be reused.
		doc, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		r.code, r.msg = xmlField(doc, "Code"), xmlField(doc, "Message")
	}
	return r, nil
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
