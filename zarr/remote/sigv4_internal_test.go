package remote

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/encoding/httpbinding"
)

// The s3:// reads are plain HTTP requests signed here; these tests hold
// them to what the AWS SDK does: its signer's Authorization header, its
// client's URLs, and its error codes and messages.

// sigKeys are object keys that escape in every way S3 cares about.
var sigKeys = []string{
	"zarr.json", "d/x y", "a+b=c~d", "nested/deep/er/c/0/1", "ünïcødé/ключ/鍵",
	"sp ace/+/=/~/", "odd!*'();:@&$,?#[]%25", "tab\tnl\n", "-_.~",
}

// s3Layouts are endpoint settings and regions: path-style below custom
// endpoints (one with a path, one with the scheme's default port), and
// AWS's virtual-hosted and path-style (a dotted bucket) URLs.
var s3Layouts = []struct {
	name, endpoint, region, bucket string
}{
	{"path-style", "http://127.0.0.1:9000", "us-east-1", "bucket"},
	{"path-style with a path", "http://minio.example:9000/s3/api/", "eu-central-1", "data"},
	{"path-style on the default port", "https://minio.example:443", "us-west-2", "data"},
	{"virtual-hosted", "", "eu-west-1", "my-bucket"},
	{"virtual-hosted us-east-1", "", "us-east-1", "data-2"},
	{"dotted bucket", "", "ap-southeast-2", "my.dotted.bucket"},
	{"upper-case bucket", "", "eu-west-1", "Upper_Case"},
	{"short bucket", "", "eu-west-1", "ab"},
	{"IP bucket", "", "eu-west-1", "192.168.1.1"},
	{"China", "", "cn-north-1", "data"},
}

// testClients returns the s3Clients of a layout, signing with creds.
func testClients(t testing.TB, endpoint, region string, creds aws.CredentialsProvider) *s3Clients {
	c := &s3Clients{http: http.DefaultClient, own: true, region: region}
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		c.custom = u
	}
	if creds != nil {
		c.signer = newS3Signer(creds, region)
	}
	return c
}

// TestSigV4MatchesSDK: the Authorization header (and X-Amz-Date,
// X-Amz-Security-Token) of a request signed here equals what the SDK's
// signer makes of the same request at the same time: for every layout
// and key, GET with and without a range and HEAD, with and without a
// session token, on two days (one signer throughout, so its cached
// signing key must follow the day and the secret).
func TestSigV4MatchesSDK(t *testing.T) {
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	times := []time.Time{time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC), time.Date(2026, 3, 2, 0, 0, 1, 0, time.FixedZone("x", 3600))}
	credSets := []aws.Credentials{
		{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
		{AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: "other+secret/=", SessionToken: "FwoGZXIvYXdzEBYaDH//token+with/slashes=="},
	}
	for _, l := range s3Layouts {
		t.Run(l.name, func(t *testing.T) {
			c := testClients(t, l.endpoint, l.region, credentials.NewStaticCredentialsProvider("unused", "unused", ""))
			b := c.backend(l.bucket)
			n := 0
			for _, key := range sigKeys {
				for _, m := range []struct{ method, rng string }{{"GET", ""}, {"GET", "bytes=100-4194403"}, {"GET", "bytes=-512"}, {"HEAD", ""}} {
					for _, creds := range credSets {
						for _, at := range times {
							req, path, err := b.req.request(context.Background(), m.method, key, m.rng)
							if err != nil {
								t.Fatal(err)
							}
							c.signer.sign(req, path, creds, at)
							want := req.Clone(context.Background())
							for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
								want.Header.Del(h)
							}
							if err := sdk.SignHTTP(context.Background(), creds, want, unsignedPayload, "s3", l.region, at); err != nil {
								t.Fatal(err)
							}
							for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
								if got, w := req.Header.Get(h), want.Header.Get(h); got != w {
									t.Errorf("%s %q %s, token %v, %v: %s\n got %s\nwant %s", m.method, key, m.rng, creds.SessionToken != "", at, h, got, w)
								}
							}
							if req.Host != want.Host {
								t.Errorf("%q: Host %q, the SDK's %q", key, req.Host, want.Host)
							}
							n++
						}
					}
				}
			}
			if n == 0 {
				t.Fatal("no cases")
			}
		})
	}
}

// captured is a transport that records the request and answers with
// resp, or fails.
type captured struct {
	req  *http.Request
	resp func(*http.Request) *http.Response
}

var errCaptured = errors.New("captured")

func (c *captured) Do(req *http.Request) (*http.Response, error) {
	c.req = req
	if c.resp != nil {
		return c.resp(req), nil
	}
	return nil, errCaptured
}

// TestS3URLsMatchSDK: an object's URL (scheme, host, escaped path) is the
// one the SDK's client requested for the same bucket, key, region and
// endpoint.
func TestS3URLsMatchSDK(t *testing.T) {
	for _, l := range s3Layouts {
		c := testClients(t, l.endpoint, l.region, nil)
		b := c.backend(l.bucket)
		for _, key := range sigKeys {
			cap := &captured{}
			// Signed, so that the SDK's Host header drops a default port
			// as ours does.
			creds := credentials.NewStaticCredentialsProvider("AKIAEXAMPLE", "secret", "")
			client := s3.New(s3.Options{Region: l.region, HTTPClient: cap, Retryer: aws.NopRetryer{}, Credentials: creds}, func(o *s3.Options) {
				if l.endpoint != "" {
					o.BaseEndpoint, o.UsePathStyle = aws.String(l.endpoint), true
				}
			})
			if _, err := client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &l.bucket, Key: &key}); !errors.Is(err, errCaptured) {
				t.Fatalf("%s %q: the SDK's GetObject: %v", l.name, key, err)
			}
			req, _, err := b.req.request(context.Background(), "GET", key, "")
			if err != nil {
				t.Fatal(err)
			}
			got := req.URL.Scheme + "://" + req.Host + req.URL.EscapedPath()
			host := cap.req.Host // set where the SDK's signer dropped a default port
			if host == "" {
				host = cap.req.URL.Host
			}
			want := cap.req.URL.Scheme + "://" + host + cap.req.URL.EscapedPath()
			if got != want {
				t.Errorf("%s %q:\n got %s\nwant %s (the SDK's)", l.name, key, got, want)
			}
		}
	}
}

// TestS3ErrorsMatchSDK: the code and message of a failed GET or HEAD are
// what the SDK's client reported (through failure, as before): from the
// error document, from the status when there is none (a HEAD), the typed
// errors' messages, a document that is not XML, and a 301's region.
func TestS3ErrorsMatchSDK(t *testing.T) {
	type reply struct {
		status int
		body   string
	}
	doc := func(code, msg string) string {
		return `<?xml version="1.0" encoding="UTF-8"?>` + "\n<Error><Code>" + code + "</Code><Message>" + msg + "</Message><Key>k</Key><RequestId>1</RequestId></Error>"
	}
	replies := []reply{
		{404, doc("NoSuchKey", "The specified key does not exist.")},
		{404, doc("NoSuchBucket", "The specified bucket does not exist")},
		{404, ""},
		{404, "<Error><Code>nosuchkey</Code></Error>"},
		{403, doc("AccessDenied", "Access Denied")},
		{403, doc("SignatureDoesNotMatch", "The request signature we calculated does not match &amp; &lt;so on&gt;")},
		{403, ""},
		{400, "<Error><Code>BadDigest</Code></Error>"},
		{400, "<Error><Message>only a message</Message></Error>"},
		{403, doc("InvalidObjectState", "archived")},
		{301, doc("PermanentRedirect", "The bucket you are attempting to access must be addressed using the specified endpoint.")},
		{301, ""},
		{500, "oops, not XML"},
		{502, "<html><body>Bad Gateway</body></html>"},
		{503, doc("SlowDown", "Please reduce your request rate.")},
		{503, "<Error><Code>Unclosed"},
		{599, ""},
	}
	for _, rp := range replies {
		for _, method := range []string{"GET", "HEAD"} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Amz-Bucket-Region", "eu-north-1")
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(rp.status)
				w.Write([]byte(rp.body))
			}))
			c := testClients(t, srv.URL, "us-east-1", nil)
			c.http = srv.Client()
			b := c.backend("bkt")
			r, err := b.do(context.Background(), method, "some/key", "")
			if err != nil {
				t.Fatal(err)
			}
			r.body.Close()
			client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true, HTTPClient: srv.Client(), Retryer: aws.NopRetryer{}, Credentials: aws.AnonymousCredentials{}})
			bucket, key := "bkt", "some/key"
			if method == "GET" {
				_, err = client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
			} else {
				_, err = client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
			}
			want, ferr := b.failure(err)
			if ferr != nil {
				t.Fatalf("%s %d %q: the SDK gave no response: %v", method, rp.status, rp.body, ferr)
			}
			if r.status != want.status || r.code != want.code || r.msg != want.msg {
				t.Errorf("%s %d %q:\n got %d %q %q\nwant %d %q %q (the SDK's)", method, rp.status, rp.body, r.status, r.code, r.msg, want.status, want.code, want.msg)
			}
			srv.Close()
		}
	}
}

// TestEscapeKey: keys are escaped as before for http(s):// and gs://
// (url.PathEscape of each segment), and as the SDK escapes them for
// s3://; a key with nothing to escape is not copied.
func TestEscapeKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := append([]string{""}, sigKeys...)
	for range 2000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
			if rng.IntN(3) == 0 {
				b[i] = "/a-._~+= %"[rng.IntN(10)]
			}
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		segs := strings.Split(k, "/")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		if got, want := escapeKey(k, false), strings.Join(segs, "/"); got != want {
			t.Errorf("escapeKey(%q, false) = %q, want %q", k, got, want)
		}
		if got, want := escapeKey(k, true), httpbinding.EscapePath(k, false); got != want {
			t.Errorf("escapeKey(%q, true) = %q, want %q", k, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { escapeKey("a/b/c.json", true) }); n != 0 {
		t.Errorf("escapeKey of a plain key: %v allocations", n)
	}
}

// TestRequesterURLs: http(s):// and gs:// URLs are what they were: the
// base's path, the key escaped segment by segment, the base's query and
// user info.
func TestRequesterURLs(t *testing.T) {
	old := func(base *url.URL, key string) string {
		u := *base
		segs := strings.Split(key, "/")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + "/" + strings.Join(segs, "/")
		u.Path, _ = url.PathUnescape(u.RawPath)
		return u.String()
	}
	for _, b := range []string{"http://h:8080", "https://u:p%40ss@h/", "http://h/a%20b/c/", "https://h/p?X-Amz-Signature=s&x=%2F", "http://[::1]:9000/x?", "http://h/sp%2Fslash"} {
		base, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		q := requesterFor(http.DefaultClient, base)
		for _, k := range sigKeys {
			req, _, err := q.request(context.Background(), "GET", k, "")
			if err != nil {
				t.Fatal(err)
			}
			want, _ := url.Parse(old(base, k))
			if req.URL.String() != want.String() || req.URL.RequestURI() != want.RequestURI() {
				t.Errorf("%s + %q: %s, want %s", b, k, req.URL, want)
			}
		}
	}
}

// BenchmarkSign is the cost of signing one ranged GET.
func BenchmarkSign(b *testing.B) {
	c := testClients(b, "", "eu-west-1", credentials.NewStaticCredentialsProvider("AKIAEXAMPLE", "secret", ""))
	q := c.backend("bucket").req
	req, path, err := q.request(context.Background(), "GET", "data.zarr/c/0/1/2", "bytes=0-2097151")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.signer.authorize(req, path)
	}
}
