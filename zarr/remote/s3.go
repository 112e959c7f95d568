package remote

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// s3Clients is what every s3:// store of an Opener shares: the HTTP
// client and the signer of its reads, the SDK's S3 client for uploads,
// and what its messages say of the endpoint and the credentials.
type s3Clients struct {
	client   *s3.Client   // the SDK's, for uploads
	http     *http.Client // the reads' (GET, HEAD)
	own      bool         // http is the Opener's own, which never asks for gzip
	signer   *s3Signer    // nil: the reads are unsigned
	endpoint string       // the custom endpoint, else AWS's for the region
	custom   *url.URL
	source   string // the setting that gave the custom endpoint
	region   string
	// creds says where the credentials came from ("the environment
	// (AWS_ACCESS_KEY_ID)"); "" when the requests are unsigned, and then
	// unsigned says why.
	creds, unsigned string
}

// s3Backend reads objects of one bucket with plain HTTP requests, signed
// (SigV4) unless anonymous; retries are this package's. Uploads go
// through the AWS SDK's client.
type s3Backend struct {
	c    *s3Clients
	name string // the bucket's
	req  requester
	host string // the host the requests go to, when not a custom endpoint
}

func (o *Opener) newS3Backend(ctx context.Context, bucket string) (backend, error) {
	if o.s3 == nil {
		c, err := o.s3Setup(ctx)
		if err != nil {
			return nil, err
		}
		o.s3 = c
	}
	return o.s3.backend(bucket), nil
}

// backend returns the backend of bucket, its URLs laid out as the SDK
// lays them out: path-style below a custom endpoint
// (ENDPOINT/bucket/key, the endpoint's path kept), else virtual-hosted
// (https://bucket.s3.REGION.amazonaws.com/key), or path-style on AWS's
// regional endpoint for a bucket whose name cannot be a host label (one
// with dots, which the certificate would not cover).
func (c *s3Clients) backend(bucket string) *s3Backend {
	b := &s3Backend{c: c, name: bucket}
	if u := c.custom; u != nil {
		// The Host header, as sent and as signed, has no default port.
		host := u.Host
		if p := u.Port(); p == "80" && u.Scheme == "http" || p == "443" && u.Scheme == "https" {
			host = strings.TrimSuffix(host, ":"+p)
		}
		b.req = newRequester(c.http, u.Scheme+"://"+host, strings.TrimSuffix(u.EscapedPath(), "/")+"/"+escapeKey(bucket, true), "")
	} else if virtualHostable(bucket) {
		b.host = bucket + ".s3." + c.region + "." + dnsSuffix(c.region)
		b.req = newRequester(c.http, "https://"+b.host, "", "")
	} else {
		b.host = "s3." + c.region + "." + dnsSuffix(c.region)
		b.req = newRequester(c.http, "https://"+b.host, "/"+escapeKey(bucket, true), "")
	}
	b.req.s3Keys, b.req.identity = true, !c.own
	if c.signer != nil {
		b.req.auth = c.signer
	}
	return b
}

// virtualHostable reports whether a bucket can be addressed as a host
// name over https, as the SDK decides it: 3 to 63 lower-case letters,
// digits and hyphens, not an IP address.
func virtualHostable(bucket string) bool {
	if len(bucket) < 3 || len(bucket) > 63 || net.ParseIP(bucket) != nil {
		return false
	}
	for i := 0; i < len(bucket); i++ {
		if c := bucket[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// dnsSuffix is the domain of AWS's endpoints in region: amazonaws.com,
// amazonaws.com.cn in China.
func dnsSuffix(region string) string {
	if strings.HasPrefix(region, "cn-") {
		return "amazonaws.com.cn"
	}
	return "amazonaws.com"
}

// s3Endpoint returns the custom endpoint, the option's else the
// environment's, and the setting that gave it.
func (o *Opener) s3Endpoint() (endpoint, source string) {
	if o.opts.S3.Endpoint != "" {
		return o.opts.S3.Endpoint, "Options.S3.Endpoint"
	}
	return firstEnv("DAMACY_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
}

// s3Setup loads the SDK's configuration (region, credentials chain,
// profiles) and makes the client and the signer of the reads, and the
// SDK's client for uploads.
func (o *Opener) s3Setup(ctx context.Context) (*s3Clients, error) {
	opts := o.opts.S3
	// The SDK adds a CA bundle (AWS_CA_BUNDLE, ca_bundle in the profile)
	// to a client it can build; ours is then made from what it built. A
	// caller's own client is used as it is.
	var hc config.HTTPClient = o.client
	if o.own {
		hc = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tuneTransport(tr, o.opts.Concurrency) })
	}
	load := []func(*config.LoadOptions) error{config.WithHTTPClient(hc)}
	if opts.Region != "" {
		load = append(load, config.WithRegion(opts.Region))
	}
	static := opts.AccessKeyID != "" && opts.SecretAccessKey != ""
	if static {
		load = append(load, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(opts.AccessKeyID, opts.SecretAccessKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("remote: S3 configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if _, ok := cfg.Credentials.(*aws.CredentialsCache); !ok && cfg.Credentials != nil {
		// Each request asks for the credentials: a cache answers at once,
		// and refreshes those that expire.
		cfg.Credentials = aws.NewCredentialsCache(cfg.Credentials)
	}
	c := &s3Clients{http: o.client, region: cfg.Region, creds: "Options.S3 (AccessKeyID, SecretAccessKey)"}
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok && o.own {
		// Redirects are not followed: S3's carry a signature for another
		// host, and a 301 says the bucket's region.
		tr := bc.GetTransport()
		c.http = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		c.own = true
		cfg.HTTPClient = c.http
		o.idle = append(o.idle, tr)
	}
	anonymous := opts.Anonymous || envFlag("DAMACY_S3_ANONYMOUS")
	if anonymous {
		c.unsigned = "the request was unsigned (anonymous, as asked)"
	}
	if !anonymous && !static {
		// Resolve once now: a chain that finds nothing means unsigned
		// requests (public buckets), and a 403 will say why.
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		creds, err := cfg.Credentials.Retrieve(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			anonymous = true
			c.unsigned = "the request was unsigned: no AWS credentials found (" + err.Error() + ")"
		}
		c.creds = credsSource(creds.Source)
	}
	if anonymous {
		cfg.Credentials = aws.AnonymousCredentials{}
		c.creds = ""
	} else {
		c.signer = newS3Signer(cfg.Credentials, cfg.Region)
	}
	endpoint, source := o.s3Endpoint()
	c.endpoint = endpoint
	if endpoint == "" {
		c.endpoint = "https://s3." + cfg.Region + "." + dnsSuffix(cfg.Region)
	} else {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("remote: S3 endpoint %q (from %s) is not an http(s) URL", Redact(endpoint), source)
		}
		c.custom, c.source = u, source
	}
	c.client = s3.NewFromConfig(cfg, func(so *s3.Options) {
		if endpoint != "" {
			so.BaseEndpoint = aws.String(endpoint)
			so.UsePathStyle = true
		}
		so.Retryer = aws.NopRetryer{}
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.DisableLogOutputChecksumValidationSkipped = true
	})
	return c, nil
}

func (b *s3Backend) uri(key string) string { return "s3://" + b.name + "/" + key }

func (b *s3Backend) endpoint() string { return b.c.endpoint }

func (b *s3Backend) bucket() string { return b.name }

func (b *s3Backend) server() server {
	if b.c.custom != nil {
		return server{role: "S3 endpoint", hostport: hostPort(b.c.custom), source: b.c.source}
	}
	return server{role: "S3 endpoint", hostport: b.host + ":443"}
}

// denied says what the refused request was signed with, and what to check.
func (b *s3Backend) denied(key, code string) string {
	if b.c.creds == "" {
		return b.c.unsigned + fmt.Sprintf("; the bucket %q may not allow anonymous reads of %q", b.name, key)
	}
	switch code {
	case "InvalidAccessKeyId":
		return fmt.Sprintf("the access key ID from %s is unknown to %s", b.c.creds, b.server())
	case "SignatureDoesNotMatch":
		return fmt.Sprintf("the secret access key from %s does not match its access key ID", b.c.creds)
	case "ExpiredToken", "TokenRefreshRequired":
		return fmt.Sprintf("the session token from %s has expired", b.c.creds)
	}
	return fmt.Sprintf("signed with credentials from %s: check that they may read (s3:GetObject) key %q of bucket %q", b.c.creds, key, b.name)
}

// credsSource says where the SDK's chain found credentials, from their
// Source.
func credsSource(source string) string {
	switch {
	case source == "EnvConfigCredentials":
		return "the environment (AWS_ACCESS_KEY_ID)"
	case strings.HasPrefix(source, "SharedConfigCredentials"):
		if p := os.Getenv("AWS_PROFILE"); p != "" {
			return "the shared credentials file (profile " + p + ")"
		}
		return "the shared credentials file"
	case source == "":
		return "the AWS SDK's default chain"
	}
	return source
}

func (b *s3Backend) do(ctx context.Context, method, key, rng string) (*response, error) {
	resp, err := b.req.send(ctx, method, key, rng)
	if err != nil {
		return nil, err
	}
	r := &response{status: resp.StatusCode, header: resp.Header, length: resp.ContentLength, body: resp.Body}
	if failed(resp) {
		// The error document: S3's are small; read it whole, as the SDK did.
		doc, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		r.code, r.msg = s3ErrorFields(method, r.status, doc)
		r.msg = regionHint(r.status, r.header, r.msg)
	}
	return r, nil
}

// s3ErrorFields returns the error code and message of a failed response
// (its status, and the error document it carried) as the AWS SDK gave
// them, which this package's messages have always shown: the document's
// Code and Message, both from the status when it has neither (a HEAD's
// response has no body: 404 is "NotFound"), "UnknownError" for the one
// missing; and for the errors the SDK knows by type (GET's NoSuchKey and
// InvalidObjectState, HEAD's NotFound), the code by its name and only the
// document's message. A malformed document gives neither.
func s3ErrorFields(method string, status int, doc []byte) (code, msg string) {
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if err := xml.NewDecoder(bytes.NewReader(doc)).Decode(&e); err != nil && err != io.EOF {
		return "", ""
	}
	code, msg = e.Code, e.Message
	if code == "" && msg == "" {
		text := http.StatusText(status)
		code, msg = strings.ReplaceAll(text, " ", ""), text
	}
	if code == "" {
		code = "UnknownError"
	}
	if msg == "" {
		msg = "UnknownError"
	}
	typed := []string{"NoSuchKey", "InvalidObjectState"}
	if method == http.MethodHead {
		typed = []string{"NotFound"}
	}
	for _, t := range typed {
		if strings.EqualFold(code, t) {
			return t, e.Message
		}
	}
	return code, msg
}

// regionHint adds to the message of a 301 what its X-Amz-Bucket-Region
// says: the bucket is in another region.
func regionHint(status int, header http.Header, msg string) string {
	if region := header.Get("X-Amz-Bucket-Region"); status == http.StatusMovedPermanently && region != "" {
		return strings.TrimPrefix(msg+"; ", "; ") + "the bucket is in region " + region + ": set AWS_REGION=" + region
	}
	return msg
}

// failure turns an error of the SDK's client (an upload's) into a
// response carrying the status and the service's error code, or returns
// it as a transport error when no response came (the SDK then reports
// status 0).
func (b *s3Backend) failure(err error) (*response, error) {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.HTTPStatusCode() == 0 {
		return nil, err
	}
	r := &response{status: re.HTTPStatusCode(), header: re.Response.Header, length: -1, body: http.NoBody}
	if r.header == nil {
		r.header = http.Header{}
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		r.code, r.msg = api.ErrorCode(), api.ErrorMessage()
	}
	r.msg = regionHint(r.status, r.header, r.msg)
	return r, nil
}
