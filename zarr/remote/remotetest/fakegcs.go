package remotetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/remote"
)

// FakeGCSVersion is the version of github.com/fsouza/fake-gcs-server, a
// GCS emulator, the gs:// tests run (the newest release whose go.mod asks
// for no newer Go than this module's). The Makefile's FAKE_GCS_VERSION
// must be the same.
//
// It runs as a built binary, as MinIO does, not in-process through its
// fakestorage package: that package would put about fifty modules (Google
// Cloud's storage client, gRPC, OpenTelemetry) into this module's go.mod,
// which every program that imports the module inherits, and raise the
// version of one it uses (cloud.google.com/go/compute/metadata).
const FakeGCSVersion = "v1.54.0"

// Environment variables that steer FakeGCSBinary.
const (
	// EnvFakeGCS names a fake-gcs-server binary to use instead of the
	// cached one.
	EnvFakeGCS = "DAMACY_FAKE_GCS"
	// EnvRequireFakeGCS, set to 1, makes a missing binary get built (with
	// go install, about a minute) rather than the tests skipped: CI sets
	// it.
	EnvRequireFakeGCS = "DAMACY_REQUIRE_FAKE_GCS"
)

// fakeGCSBinary finds or builds the emulator once per test process.
var fakeGCSBinary = sync.OnceValue(tool{name: "fake-gcs-server", module: "github.com/fsouza/fake-gcs-server", version: FakeGCSVersion,
	env: EnvFakeGCS, require: EnvRequireFakeGCS, target: "fake-gcs"}.find)

// FakeGCSBinary returns the emulator's binary: $DAMACY_FAKE_GCS, else
// .cache/fake-gcs-server/fake-gcs-server at the module's root when its
// stamp names FakeGCSVersion, else (with DAMACY_REQUIRE_FAKE_GCS=1) one
// built there now. skip is non-empty, and says why, when there is none
// and none is to be built.
func FakeGCSBinary() (path, skip string, err error) {
	f := fakeGCSBinary()
	return f.path, f.skip, f.err
}

// FakeGCS is a fake-gcs-server of a test, on a loopback port, keeping its
// objects in memory. It serves GCS's XML API (GET and HEAD of
// /BUCKET/OBJECT, with ranges) and its JSON API, and checks no
// credentials.
type FakeGCS struct {
	Endpoint string // http://127.0.0.1:PORT
	client   *http.Client
}

// StartFakeGCS starts the emulator for the test and stops it at the end;
// it skips the test when there is no binary (see FakeGCSBinary).
func StartFakeGCS(t testing.TB) *FakeGCS {
	t.Helper()
	bin, skip, err := FakeGCSBinary()
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	g := &FakeGCS{client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(g.client.CloseIdleConnections)
	var lastErr error
	for range 3 { // a port taken between probing and binding: try others
		if lastErr = g.start(t, bin); lastErr == nil {
			return g
		}
	}
	t.Fatal(lastErr)
	return nil
}

func (g *FakeGCS) start(t testing.TB, bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The public host must be the address requests name, or the emulator
	// takes the Host header for a bucket.
	cmd := exec.Command(bin, "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", fmt.Sprint(port),
		"-public-host", addr, "-external-url", "http://"+addr, "-log-level", "error")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	srv, err := startServer("fake-gcs-server", cmd)
	if err != nil {
		return err
	}
	g.Endpoint = "http://" + addr
	if err := srv.waitHealthy(g.client, g.Endpoint+"/_internal/healthcheck", "not ready after 30 s", time.Now().Add(30*time.Second)); err != nil {
		return err
	}
	t.Cleanup(srv.stop)
	return nil
}

// Options returns Opener options that reach the emulator, anonymously.
func (g *FakeGCS) Options() remote.Options {
	return remote.Options{GCS: remote.GCSOptions{Endpoint: g.Endpoint, Anonymous: true}}
}

// CreateBucket makes a bucket, through the JSON API.
func (g *FakeGCS) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": bucket})
	g.call(t, http.MethodPost, g.Endpoint+"/storage/v1/b", "application/json", body)
}

// Upload copies the files below dir to the gs:// URI dst (one media
// upload per file, through the JSON API).
func (g *FakeGCS) Upload(t testing.TB, dir, dst string) {
	t.Helper()
	u, err := url.Parse(dst)
	if err != nil || u.Scheme != "gs" || u.Host == "" {
		t.Fatalf("remotetest: upload to %s: want gs://bucket/prefix", dst)
	}
	prefix := strings.Trim(u.Path, "/")
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := path.Join(prefix, filepath.ToSlash(rel))
		g.call(t, http.MethodPost, g.Endpoint+"/upload/storage/v1/b/"+url.PathEscape(u.Host)+"/o?uploadType=media&name="+url.QueryEscape(name), "application/octet-stream", b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (g *FakeGCS) call(t testing.TB, method, u, contentType string, body []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		t.Fatalf("remotetest: %s %s: %s: %s", method, u, resp.Status, msg)
	}
}
