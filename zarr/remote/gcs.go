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
	source   string             // the setting that chose the endpoint, if not the default
	tokens   oauth2.TokenSource // nil: anonymous
	// creds says where the credentials came from; anonymous, why there
	// are none.
	creds, anonymous string
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
	b := &httpBackend{requester: requesterFor(o.client, &base), base: &base, name: "gs://" + bucket, gcs: o.gcs, bucketName: bucket, tokens: o.gcs.tokens}
	if b.tokens != nil {
		b.auth = tokenAuth{b.tokens}
	}
	return b, nil
}

// gcsSetup finds the endpoint and the credentials: the options', else
// the application default credentials; none found means anonymous.
func (o *Opener) gcsSetup(ctx context.Context) (*gcsAuth, error) {
	opts := o.opts.GCS
	ep, source := opts.Endpoint, "Options.GCS.Endpoint"
	if ep == "" {
		ep, source = os.Getenv("DAMACY_GCS_ENDPOINT"), "DAMACY_GCS_ENDPOINT"
	}
	if ep == "" {
		if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
			ep, source = h, "STORAGE_EMULATOR_HOST"
			if !strings.Contains(h, "://") {
				ep = "http://" + h
			}
		}
	}
	if ep == "" {
		ep, source = "https://storage.googleapis.com", ""
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		where := ""
		if source != "" {
			where = " (from " + source + ")"
		}
		return nil, fmt.Errorf("remote: GCS endpoint %q%s is not an http(s) URL", Redact(ep), where)
	}
	a := &gcsAuth{endpoint: u, source: source}
	if opts.Anonymous || envFlag("DAMACY_GCS_ANONYMOUS") {
		a.anonymous = "the request carried no credentials (anonymous, as asked)"
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
		a.creds = "the service-account key file " + opts.CredentialsFile
	} else {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		creds, err = google.FindDefaultCredentials(tctx, gcsScope)
		if err != nil {
			// None: anonymous, as public buckets accept.
			a.anonymous = "the request carried no credentials: no application default credentials found"
			return a, nil
		}
		a.creds = "the application default credentials"
		if f := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); f != "" {
			a.creds += " (GOOGLE_APPLICATION_CREDENTIALS=" + f + ")"
		}
	}
	a.tokens = oauth2.ReuseTokenSource(nil, creds.TokenSource)
	return a, nil
}
