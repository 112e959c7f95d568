// Package remotetest runs servers for tests of object stores: MinIO, built
// from its pinned Go module, and an HTTP file server with Range support
// that injects faults.
package remotetest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/damacy-go/damacy/zarr/remote"
)

// MinIOVersion is the version of github.com/minio/minio the tests run
// (the last commit of the module when it was pinned). The Makefile's
// MINIO_VERSION must be the same.
const MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Environment variables that steer MinIOBinary.
const (
	// EnvMinIO names a MinIO binary to use instead of the cached one.
	EnvMinIO = "DAMACY_MINIO"
	// EnvRequireMinIO, set to 1, makes a missing binary get built (with
	// go install, a few minutes) rather than the tests skipped: CI sets it.
	EnvRequireMinIO = "DAMACY_REQUIRE_MINIO"
)

// minioBinary finds or builds MinIO once per test process (a probe
// cached, as internal/testenv does).
var minioBinary = sync.OnceValue(tool{name: "minio", module: "github.com/minio/minio", version: MinIOVersion, env: EnvMinIO, require: EnvRequireMinIO, target: "minio"}.find)

// MinIOBinary returns the MinIO binary: $DAMACY_MINIO, else
// .cache/minio/minio at the module's root when its stamp names
// MinIOVersion, else (with DAMACY_REQUIRE_MINIO=1) one built there now.
// skip is non-empty, and says why, when there is none and none is to be
// built.
func MinIOBinary() (path, skip string, err error) {
	f := minioBinary()
	return f.path, f.skip, f.err
}

// MinIO is a MinIO server of a test, on a loopback port with a data
// directory of its own.
type MinIO struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string

	client *s3.Client
	opener *remote.Opener
	pid    int
}

// StartMinIO starts a MinIO server for the test and stops it at the end;
// it skips the test when there is no binary (see MinIOBinary).
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin, skip, err := MinIOBinary()
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	m := &MinIO{AccessKey: "damacytest", SecretKey: "damacytest-secret"}
	var lastErr error
	for range 3 { // a port taken between probing and binding: try others
		if lastErr = m.start(t, bin); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatal(lastErr)
	}
	m.opener, err = remote.NewOpener(m.Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.opener.Close() })
	return m
}

func (m *MinIO) start(t testing.TB, bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	cport, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	data, home := t.TempDir(), t.TempDir()
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", fmt.Sprintf("127.0.0.1:%d", cport), data)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"MINIO_ROOT_USER=" + m.AccessKey, "MINIO_ROOT_PASSWORD=" + m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1",
	}
	srv, err := startServer("MinIO", cmd)
	if err != nil {
		return err
	}
	m.pid = cmd.Process.Pid
	m.Endpoint = "http://" + addr
	m.client = s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(m.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, ""),
	})
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(90 * time.Second)
	if err := srv.waitHealthy(client, m.Endpoint+"/minio/health/live", "not live after 90 s", deadline); err != nil {
		return err
	}
	client.CloseIdleConnections()
	// Live is not ready: until its storage is initialised MinIO answers S3
	// calls with 503 XMinioServerNotInitialized. Wait for a bucket listing.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := m.client.ListBuckets(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			srv.stop()
			return fmt.Errorf("remotetest: MinIO not ready after 90 s: %v\n%s", err, srv.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(srv.stop)
	return nil
}

// CPUTime returns the CPU time (user and system) the server has used so
// far, from /proc (Linux only), for benchmarks to tell the server's share
// of a transfer's cost from the client's.
func (m *MinIO) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) in parentheses:
	// utime and stime are the 12th and 13th, in clock ticks of 1/100 s
	// (USER_HZ on every Linux architecture Go supports).
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("remotetest: unexpected /proc/%d/stat", m.pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// Options returns Opener options that reach the server with its root
// credentials.
func (m *MinIO) Options() remote.Options {
	return remote.Options{S3: remote.S3Options{Endpoint: m.Endpoint, AccessKeyID: m.AccessKey, SecretAccessKey: m.SecretKey, Region: "us-east-1"}}
}

// CreateBucket makes a bucket.
func (m *MinIO) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	if _, err := m.client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// MakePublic lets anonymous clients read the bucket's objects (not list
// them).
func (m *MinIO) MakePublic(t testing.TB, bucket string) {
	t.Helper()
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::%s/*"]}]}`, bucket)
	if _, err := m.client.PutBucketPolicy(context.Background(), &s3.PutBucketPolicyInput{Bucket: &bucket, Policy: &policy}); err != nil {
		t.Fatalf("bucket policy %s: %v", bucket, err)
	}
}

// Upload copies the files below dir to the s3:// URI dst.
func (m *MinIO) Upload(t testing.TB, dir, dst string) {
	t.Helper()
	if err := m.opener.Upload(context.Background(), dir, dst); err != nil {
		t.Fatal(err)
	}
}

// Delete removes an object.
func (m *MinIO) Delete(t testing.TB, bucket, key string) {
	t.Helper()
	if _, err := m.client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil {
		t.Fatalf("delete %s/%s: %v", bucket, key, err)
	}
}
