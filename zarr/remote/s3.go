package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// s3Clients is the S3 client every s3:// store of an Opener shares, and
// what its messages say of the endpoint and the credentials.
type s3Clients struct {
	client   *s3.Client
	endpoint string // the custom endpoint, else AWS's for the region
	custom   *url.URL
	source   string // the setting that gave the custom endpoint
	region   string
	// creds says where the credentials came from ("the environment
	// (AWS_ACCESS_KEY_ID)"); "" when the requests are unsigned, and then
	// unsigned says why.
	creds, unsigned string
}

// s3Backend reads objects of one bucket through the AWS SDK's S3 client
// (which signs the requests, SigV4); retries are this package's, the
// SDK's own are off.
type s3Backend struct {
	c    *s3Clients
	name string // the bucket's
}

func (o *Opener) newS3Backend(ctx context.Context, bucket string) (backend, error) {
	if o.s3 == nil {
		c, err := o.s3Setup(ctx)
		if err != nil {
			return nil, err
		}
		o.s3 = c
	}
	return &s3Backend{c: o.s3, name: bucket}, nil
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
// profiles) and makes the client.
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
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok && o.own {
		// Redirects are not followed: S3's carry a signature for another
		// host, and a 301 says the bucket's region.
		tr := bc.GetTransport()
		cfg.HTTPClient = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		o.idle = append(o.idle, tr)
	}
	c := &s3Clients{region: cfg.Region, creds: "Options.S3 (AccessKeyID, SecretAccessKey)"}
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
	}
	endpoint, source := o.s3Endpoint()
	c.endpoint = endpoint
	if endpoint == "" {
		c.endpoint = "https://s3." + cfg.Region + ".amazonaws.com"
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
	return server{role: "S3 endpoint", hostport: b.name + ".s3." + b.c.region + ".amazonaws.com:443"}
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
	if method == http.MethodHead {
		out, err := b.c.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.name, Key: &key})
		if err != nil {
			return b.failure(err)
		}
		r := &response{status: http.StatusOK, length: -1, body: http.NoBody, header: http.Header{}}
		if out.ContentLength != nil {
			r.length = *out.ContentLength
		}
		return r, nil
	}
	in := &s3.GetObjectInput{Bucket: &b.name, Key: &key}
	if rng != "" {
		in.Range = &rng
	}
	out, err := b.c.client.GetObject(ctx, in)
	if err != nil {
		return b.failure(err)
	}
	r := &response{status: http.StatusOK, length: -1, body: out.Body, header: http.Header{}}
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		r.status, r.header, r.length = raw.StatusCode, raw.Header, raw.ContentLength
	} else {
		// Without the raw response, trust only what the output says.
		if out.ContentRange != nil {
			r.status = http.StatusPartialContent
			r.header.Set("Content-Range", *out.ContentRange)
		}
		if out.ContentLength != nil {
			r.length = *out.ContentLength
		}
	}
	return r, nil
}

// failure turns an SDK error into a response carrying the status and the
// service's error code, or returns it as a transport error when no
// response came (the SDK then reports status 0).
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
	if region := r.header.Get("X-Amz-Bucket-Region"); r.status == http.StatusMovedPermanently && region != "" {
		r.msg = strings.TrimPrefix(r.msg+"; ", "; ") + "the bucket is in region " + region + ": set AWS_REGION=" + region
	}
	return r, nil
}
