package remote_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// TestS3MinIO reads objects uploaded to a MinIO server through s3://:
// signed with the right keys, refused (403, not retried) with wrong ones,
// and unsigned from a public bucket and a private one.
func TestS3MinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MinIO server")
	}
	// No AWS configuration of the machine may leak in, and nothing but
	// loopback may be asked for credentials.
	isolateAWS(t)
	leakCheck(t)
	m := remotetest.StartMinIO(t)
	m.CreateBucket(t, "private")
	m.CreateBucket(t, "public")
	m.MakePublic(t, "public")
	dir, data := testObjects(t)
	m.Upload(t, dir, "s3://private/p")
	m.Upload(t, dir, "s3://public/p")

	t.Run("signed", func(t *testing.T) {
		opts := m.Options()
		opts.Attempts, opts.Backoff = fastOptions().Attempts, fastOptions().Backoff
		st, path, o := openStore(t, opts, "s3://private/p")
		if path != "p" {
			t.Fatalf("path %q", path)
		}
		if e := st.Endpoint(); e != m.Endpoint {
			t.Errorf("Endpoint() = %q, want %q", e, m.Endpoint)
		}
		checkReads(t, st, "p/", data)
		if s := o.Stats(); s.Retries != 0 {
			t.Errorf("%d retries against a healthy server", s.Retries)
		}
		// A tail is one suffix-range request, which also tells the size.
		before := o.Stats().Requests
		if n, err := st.ReadTail("p/d/a", make([]byte, 100)); err != nil || n != int64(len(data["d/a"])) {
			t.Errorf("ReadTail = %d, %v", n, err)
		}
		if n := o.Stats().Requests - before; n != 1 {
			t.Errorf("ReadTail took %d requests, want 1", n)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		opts := m.Options()
		opts.S3.SecretAccessKey = secret
		st, _, o := openStore(t, opts, "s3://private/p")
		_, err := st.ReadAt("p/d/a", make([]byte, 10), 0)
		var re *remote.Error
		if !errors.Is(err, fs.ErrPermission) || !errors.As(err, &re) || !strings.Contains(err.Error(), "s3://private/p/d/a") {
			t.Fatalf("err = %v, want a 403 naming s3://private/p/d/a", err)
		}
		if s := o.Stats(); s.Requests != 1 {
			t.Errorf("%d requests, want 1 (no retries on 403)", s.Requests)
		}
	})
	// What a new user meets first, reading a node's metadata.
	host := strings.TrimPrefix(m.Endpoint, "http://")
	wrongKey, wrongSecret, anonymous := m.Options(), m.Options(), m.Options()
	wrongKey.S3.AccessKeyID = "AKIA" + secret
	wrongSecret.S3.SecretAccessKey = secret
	anonymous.S3 = remote.S3Options{Endpoint: m.Endpoint, Anonymous: true}
	for _, f := range []failure{
		{name: "no such bucket", uri: "s3://nobucket/x.zarr", opts: m.Options(), is: remote.ErrNoBucket,
			want: `remote: GET s3://nobucket/x.zarr/zarr.json: 404 Not Found (NoSuchBucket): the bucket "nobucket" does not exist at the S3 endpoint ` + host + ` (from Options.S3.Endpoint)`},
		{name: "access denied", uri: "s3://private/p/d", opts: anonymous, is: fs.ErrPermission,
			want: `remote: GET s3://private/p/d/zarr.json: 403 Forbidden (AccessDenied): Access Denied; the request was unsigned (anonymous, as asked); the bucket "private" may not allow anonymous reads of "p/d/zarr.json"`},
		{name: "signature mismatch", uri: "s3://private/p/d", opts: wrongSecret, is: fs.ErrPermission,
			want: `remote: GET s3://private/p/d/zarr.json: 403 Forbidden (SignatureDoesNotMatch): The request signature we calculated does not match the signature you provided. Check your key and signing method; the secret access key from Options.S3 (AccessKeyID, SecretAccessKey) does not match its access key ID`},
		{name: "unknown key ID", uri: "s3://private/p/d", opts: wrongKey, is: fs.ErrPermission,
			want: `remote: GET s3://private/p/d/zarr.json: 403 Forbidden (InvalidAccessKeyId): The Access Key Id you provided does not exist in our records; the access key ID from Options.S3 (AccessKeyID, SecretAccessKey) is unknown to the S3 endpoint ` + host + ` (from Options.S3.Endpoint)`},
	} {
		t.Run(f.name, func(t *testing.T) {
			f.opts.Attempts, f.opts.Backoff, f.attempts = 3, time.Millisecond, 1
			f.check(t)
		})
	}
	t.Run("missing node", func(t *testing.T) {
		err := openNode(t, m.Options(), "s3://private/missing.zarr")
		if want := "zarr: s3://private/missing.zarr: not found: no zarr.json, .zarray or .zgroup"; err.Error() != want || !errors.Is(err, zarr.ErrNotFound) {
			t.Errorf("err = %v; want %s", err, want)
		}
	})
	t.Run("anonymous", func(t *testing.T) {
		opts := remote.Options{S3: remote.S3Options{Endpoint: m.Endpoint, Anonymous: true}}
		o, err := remote.NewOpener(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		st, _, err := o.Open(context.Background(), "s3://public/p")
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 10)
		if n, err := st.ReadAt("p/d/small", p, 0); err != nil || string(p[:n]) != "0123456789" {
			t.Errorf("public read: %d, %v", n, err)
		}
		st, _, err = o.Open(context.Background(), "s3://private/p")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReadAt("p/d/small", p, 0); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("unsigned read of a private bucket: %v, want a permission error", err)
		}
	})
	t.Run("no credentials found", func(t *testing.T) {
		// The standard chain finds nothing: requests go unsigned, and a
		// 403 says so.
		opts := remote.Options{S3: remote.S3Options{Endpoint: m.Endpoint}}
		o, err := remote.NewOpener(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		st, _, err := o.Open(context.Background(), "s3://private/p")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReadAt("p/d/small", make([]byte, 4), 0); !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "unsigned") {
			t.Errorf("err = %v, want a 403 that says the request was unsigned", err)
		}
	})
}

// TestS3SignedKeysAndSessionToken reads, signed, objects whose keys
// escape in every way (spaces, "+", "=", "~", unicode, nested), with the
// root credentials and with temporary ones from MinIO's STS (AssumeRole),
// found in the environment, whose session token is signed too; a token
// that is not the server's is refused.
func TestS3SignedKeysAndSessionToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MinIO server")
	}
	isolateAWS(t)
	leakCheck(t)
	m := remotetest.StartMinIO(t)
	m.CreateBucket(t, "keys")
	dir := t.TempDir()
	objects := map[string]string{
		"a+b=c~d": "plus", "sp ace/(1).json": "space", "ünïcødé/ключ/鍵": "unicode",
		"nested/deep/er/c/0/1": "nested", "odd!*'();:@&$,[]%25": "odd",
	}
	for k, v := range objects {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	m.Upload(t, dir, "s3://keys/p")
	read := func(t *testing.T, opts remote.Options) {
		st, _, _ := openStore(t, opts, "s3://keys/p")
		for k, v := range objects {
			b, err := st.ReadObject("p/"+k, 100)
			if err != nil || string(b) != v {
				t.Errorf("ReadObject(%q) = %q, %v; want %q", k, b, err, v)
			}
			if n, err := st.Size("p/" + k); err != nil || n != int64(len(v)) {
				t.Errorf("Size(%q) = %d, %v", k, n, err)
			}
		}
	}
	t.Run("root", func(t *testing.T) { read(t, m.Options()) })
	key, secret, token := assumeRole(t, m)
	t.Setenv("AWS_ACCESS_KEY_ID", key)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", token)
	fromEnv := remote.Options{S3: remote.S3Options{Endpoint: m.Endpoint, Region: "us-east-1"}}
	t.Run("session token", func(t *testing.T) { read(t, fromEnv) })
	t.Run("foreign token", func(t *testing.T) {
		t.Setenv("AWS_SESSION_TOKEN", token+"x")
		st, _, o := openStore(t, fromEnv, "s3://keys/p")
		_, err := st.ReadObject("p/a+b=c~d", 100)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "the environment (AWS_ACCESS_KEY_ID)") {
			t.Errorf("err = %v, want a 403 naming the credentials' source", err)
		}
		if s := o.Stats(); s.Requests != 1 {
			t.Errorf("%d requests, want 1", s.Requests)
		}
	})
}

// assumeRole gets temporary credentials from MinIO's STS with its root
// credentials: a POST of the AssumeRole action, signed for "sts".
func assumeRole(t *testing.T, m *remotetest.MinIO) (key, secret, token string) {
	t.Helper()
	body := "Action=AssumeRole&Version=2011-06-15&DurationSeconds=900"
	req, err := http.NewRequest("POST", m.Endpoint+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: m.AccessKey, SecretAccessKey: m.SecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sts", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Creds struct {
			AccessKeyID     string `xml:"AccessKeyId"`
			SecretAccessKey string
			SessionToken    string
		} `xml:"AssumeRoleResult>Credentials"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := xml.Unmarshal(b, &out); err != nil || resp.StatusCode != http.StatusOK || out.Creds.SessionToken == "" {
		t.Fatalf("AssumeRole: %s: %v\n%s", resp.Status, err, b)
	}
	return out.Creds.AccessKeyID, out.Creds.SecretAccessKey, out.Creds.SessionToken
}
