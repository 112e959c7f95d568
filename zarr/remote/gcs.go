package remote

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// gs:// goes through GCS's XML API (GET with Range, HEAD) over the same
// HTTP layer as http(s)://, with an OAuth2 bearer token unless anonymous.
// Google's Go client (cloud.google.com/go/storage) would bring gRPC,
// protobuf and OpenTelemetry into the binary, and retries of its own that
// would fight this package's; the XML API needs neither.

// gcsScope is the OAuth2 scope of the tokens: reading objects.
const gcsScope = "https://www.googleapis.com/auth/devstorage.read_only"

// gcsAuth is what every gs:// store of an Opener shares.
type gcsAuth struct {
	endpoint *url.URL
	tokens   oauth2.TokenSource // nil: anonymous
}

func (o *Opener) newGCSBackend(ctx context.Context, bucket string) (backend, error) {
	if o.gcs == nil {
		a, err := o.gcsSetup(ctx)
		if err != nil {
			return nil, err
		}
		o.gcs = a
	}
	base := *o.gcs.endpoint
	base.Path = strings.TrimSuffix(base.Path, "/") + "/" + bucket
	base.RawPath = ""
	return newHTTPBackend(o.client, &base, "gs://"+bucket, o.gcs.tokens), nil
}

// gcsSetup finds the endpoint and the credentials: the options', else
// the application default credentials; none found means anonymous.
func (o *Opener) gcsSetup(ctx context.Context) (*gcsAuth, error) {
	opts := o.opts.GCS
	ep := opts.Endpoint
	if ep == "" {
		ep = os.Getenv("DAMACY_GCS_ENDPOINT")
	}
	if ep == "" {
		if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
			ep = h
			if !strings.Contains(h, "://") {
				ep = "http://" + h
			}
		}
	}
	if ep == "" {
		ep = "https://storage.googleapis.com"
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote: GCS endpoint %q is not an http(s) URL", ep)
	}
	a := &gcsAuth{endpoint: u}
	if opts.Anonymous || envFlag("DAMACY_GCS_ANONYMOUS") {
		return a, nil
	}
	// Token requests use the Opener's client and live as long as it does
	// (ctx only bounds this setup).
	tctx := context.WithValue(o.ctx, oauth2.HTTPClient, o.client)
	var creds *google.Credentials
	if opts.CredentialsFile != "" {
		b, err := os.ReadFile(opts.CredentialsFile)
		if err != nil {
			return nil, fmt.Errorf("remote: GCS credentials: %w", err)
		}
		creds, err = google.CredentialsFromJSONWithType(tctx, b, google.ServiceAccount, gcsScope)
		if err != nil {
			return nil, fmt.Errorf("remote: GCS credentials %s: %w", opts.CredentialsFile, err)
		}
	} else {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		creds, err = google.FindDefaultCredentials(tctx, gcsScope)
		if err != nil {
			return a, nil // none: anonymous, as public buckets accept
		}
	}
	a.tokens = oauth2.ReuseTokenSource(nil, creds.TokenSource)
	return a, nil
}
