package pipeline

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// secret is the value of the credentials in the test URIs' queries: no
// message may show it.
const secret = "s3cr3t-SIGNATURE"

const presigned = "?X-Amz-Credential=AKIA" + secret + "&X-Amz-Signature=" + secret + "&token=" + secret

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// remoteFailure is a sample whose batch fails: Pop's error must match
// kind and read want, which names the sample's URI (its query masked)
// once and says the cause once.
type remoteFailure struct {
	name string
	uri  string
	cfg  func(*Config)
	kind error
	want string
}

func (f remoteFailure) check(t *testing.T) {
	t.Helper()
	cfg := remoteConfig()
	cfg.Remote.Attempts = 3
	if f.cfg != nil {
		f.cfg(&cfg)
	}
	_, _, err := runBatches(t, cfg, []Sample{{URI: f.uri, Box: []Range{{Start: 0, Stop: 9}, {Start: 0, Stop: 11}, {Start: 0, Stop: 7}}}})
	var pe *Error
	if !errors.Is(err, f.kind) || !errors.As(err, &pe) || pe.URI != f.uri {
		t.Fatalf("Pop = %v; want an *Error of kind %v for %s", err, f.kind, f.uri)
	}
	if err.Error() != f.want {
		t.Errorf("message:\n got %s\nwant %s", err, f.want)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("the message shows a secret: %s", err)
	}
	zarrtest.CheckMessage(t, f.name, err, remote.Redact(f.uri))
}

// TestRemoteErrors: the errors of a batch whose store cannot be read, as
// Pop returns them: a refused connection, an unknown host, a missing
// bucket and a missing node (MinIO), each naming the sample's URI once,
// with a presigned query masked.
func TestRemoteErrors(t *testing.T) {
	addr := closedAddr(t)
	masked := "?X-Amz-Credential=***&X-Amz-Signature=***&token=***"
	const box = "[0:9,0:11,0:7]"
	s3At := func(endpoint string) func(*Config) {
		return func(c *Config) {
			c.Remote.S3 = remote.S3Options{Endpoint: endpoint, AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: secret, Region: "us-east-1"}
		}
	}
	cases := []remoteFailure{
		{name: "refused", uri: "http://" + addr + "/x.zarr" + presigned, kind: ErrStorage,
			want: "pipeline: open (sample 1: http://" + addr + "/x.zarr" + masked + box + "): storage error: GET zarr.json: " + addr + " refused the connection (after 3 attempts)"},
		{name: "s3 refused", uri: "s3://bucket/x.zarr", cfg: s3At("http://" + addr), kind: ErrStorage,
			want: "pipeline: open (sample 1: s3://bucket/x.zarr" + box + "): storage error: GET zarr.json: the S3 endpoint " + addr + " (from Options.S3.Endpoint) refused the connection (after 3 attempts)"},
		{name: "unknown host", uri: "https://damacy-test.invalid/x.zarr" + presigned, kind: ErrStorage,
			want: "pipeline: open (sample 1: https://damacy-test.invalid/x.zarr" + masked + box + "): storage error: GET zarr.json: cannot resolve host damacy-test.invalid: no such host"},
	}
	if _, skip, err := remotetest.MinIOBinary(); err == nil && skip == "" && !testing.Short() {
		m := remotetest.StartMinIO(t)
		m.CreateBucket(t, "data")
		host := strings.TrimPrefix(m.Endpoint, "http://")
		minio := func(c *Config) { c.Remote.S3 = m.Options().S3 }
		cases = append(cases,
			remoteFailure{name: "no such bucket", uri: "s3://nobucket/x.zarr", cfg: minio, kind: ErrNotFound,
				want: `pipeline: open (sample 1: s3://nobucket/x.zarr[0:9,0:11,0:7]): not found: GET zarr.json: 404 Not Found (NoSuchBucket): the bucket "nobucket" does not exist at the S3 endpoint ` + host + ` (from Options.S3.Endpoint)`},
			remoteFailure{name: "no such node", uri: "s3://data/x.zarr", cfg: minio, kind: ErrNotFound,
				want: "pipeline: open (sample 1: s3://data/x.zarr" + box + "): not found: no zarr.json, .zarray or .zgroup"})
	} else {
		t.Log("MinIO cases not run: no MinIO binary (make minio)")
	}
	for _, f := range cases {
		t.Run(f.name, func(t *testing.T) {
			if f.name == "unknown host" {
				if _, err := net.LookupHost("damacy-test.invalid"); !isNotFound(err) {
					t.Skipf("the resolver does not answer NXDOMAIN here: %v", err)
				}
			}
			f.check(t)
		})
	}
}

func isNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// TestRemotePushMasked: a sample refused at Push names its URI with the
// query's values masked.
func TestRemotePushMasked(t *testing.T) {
	cfg := remoteConfig()
	cfg.Remote.Timeout = time.Second
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	uri := "https://example.invalid/x.zarr" + presigned
	err = p.Push(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 9}, {Start: 0, Stop: 11}}})
	if !errors.Is(err, ErrRank) || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), remote.Redact(uri)) {
		t.Errorf("Push of a sample of the wrong rank = %v; want ErrRank naming %s", err, remote.Redact(uri))
	}
}
