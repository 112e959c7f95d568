package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
// why its requests go unsigned when they do for want of credentials.
type s3Clients struct {
	client   *s3.Client
	unsigned string
	endpoint string // the custom endpoint, else AWS's for the region
}

// s3Backend reads objects of one bucket through the AWS SDK's S3 client
// (which signs the requests, SigV4); retries are this package's, the
// SDK's own are off.
type s3Backend struct {
	c      *s3Clients
	bucket string
}

func (o *Opener) newS3Backend(ctx context.Context, bucket string) (backend, error) {
	if o.s3 == nil {
		c, err := o.s3Setup(ctx)
		if err != nil {
			return nil, err
		}
		o.s3 = c
	}
	return &s3Backend{c: o.s3, bucket: bucket}, nil
}

// s3Endpoint returns the custom endpoint: the option's, else the
// environment's.
func (o *Opener) s3Endpoint() string {
	if o.opts.S3.Endpoint != "" {
		return o.opts.S3.Endpoint
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
	c := &s3Clients{}
	anonymous := opts.Anonymous || envFlag("DAMACY_S3_ANONYMOUS")
	if !anonymous && !static {
		// Resolve once now: a chain that finds nothing means unsigned
		// requests (public buckets), and a 403 will say why.
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := cfg.Credentials.Retrieve(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			anonymous = true
			c.unsigned = "the request was unsigned: no AWS credentials found (" + err.Error() + ")"
		}
	}
	if anonymous {
		cfg.Credentials = aws.AnonymousCredentials{}
	}
	endpoint := o.s3Endpoint()
	c.endpoint = endpoint
	if endpoint == "" {
		c.endpoint = "https://s3." + cfg.Region + ".amazonaws.com"
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

func (b *s3Backend) uri(key string) string { return "s3://" + b.bucket + "/" + key }

func (b *s3Backend) endpoint() string { return b.c.endpoint }

func (b *s3Backend) do(ctx context.Context, method, key, rng string) (*response, error) {
	if method == http.MethodHead {
		out, err := b.c.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
		if err != nil {
			return b.failure(err)
		}
		r := &response{status: http.StatusOK, length: -1, body: http.NoBody, header: http.Header{}}
		if out.ContentLength != nil {
			r.length = *out.ContentLength
		}
		return r, nil
	}
	in := &s3.GetObjectInput{Bucket: &b.bucket, Key: &key}
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
// response came.
func (b *s3Backend) failure(err error) (*response, error) {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil {
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
	r.hint = b.c.unsigned
	return r, nil
}
