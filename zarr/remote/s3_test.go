package remote_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

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
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "DAMACY_S3_ENDPOINT", "DAMACY_S3_ANONYMOUS", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(v, "")
	}
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
		opts.S3.SecretAccessKey = "wrong"
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
