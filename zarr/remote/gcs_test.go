package remote_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// gs:// is tested against fake-gcs-server (remotetest.StartFakeGCS), a GCS
// emulator serving the XML API the client speaks, for what the client
// sends and reads: ranged GETs (absolute and suffix ranges, past the end,
// of an empty object), HEAD for an object's size, an escaped key, the
// Authorization header (through a recording proxy), a 404 for a missing
// object and for a missing bucket.
//
// What the emulator does not do, and where it is tested instead:
//   - It checks no credentials and never answers 401 or 403: refusals go
//     through the fault server (TestGCSFaults, TestRefusals).
//   - It answers a missing bucket as a missing object, a 404 with a plain
//     text body, where GCS sends an XML document whose Code tells
//     NoSuchBucket from NoSuchKey: through the emulator a missing bucket
//     reads as absent objects, and the message that names the bucket is
//     tested with GCS's document (TestNoSuchBucket).
//   - It never throttles or fails (429, 503, resets, bodies cut short):
//     retries go through the fault server (TestGCSFaults, TestFaults).
//   - It has no token endpoint: a service account's token exchange is
//     served by a loopback stand-in (TestGCSAuth).
//   - Its 416 carries no Content-Range, unlike GCS's.

// gcsEmulator starts the emulator with testObjects' data in gs://bkt/p.
func gcsEmulator(t *testing.T) (*remotetest.FakeGCS, map[string][]byte) {
	t.Helper()
	g := remotetest.StartFakeGCS(t)
	g.CreateBucket(t, "bkt")
	dir, data := testObjects(t)
	g.Upload(t, dir, "gs://bkt/p")
	return g, data
}

// TestGCSEmulator reads objects from the emulator through gs://: sizes,
// ranges, tails (one request each), whole objects, absent objects and an
// absent bucket.
func TestGCSEmulator(t *testing.T) {
	leakCheck(t)
	g, data := gcsEmulator(t)
	opts := g.Options()
	opts.Attempts, opts.Backoff = fastOptions().Attempts, fastOptions().Backoff
	st, path, o := openStore(t, opts, "gs://bkt/p")
	if path != "p" || st.URI("p/d/a") != "gs://bkt/p/d/a" || st.Endpoint() != g.Endpoint {
		t.Fatalf("path %q, URI %q, endpoint %q", path, st.URI("p/d/a"), st.Endpoint())
	}
	checkReads(t, st, "p/", data)
	if s := o.Stats(); s.Retries != 0 {
		t.Errorf("%d retries against a healthy server", s.Retries)
	}
	before := o.Stats().Requests
	if n, err := st.ReadTail("p/d/a", make([]byte, 100)); err != nil || n != int64(len(data["d/a"])) {
		t.Errorf("ReadTail = %d, %v", n, err)
	}
	if n := o.Stats().Requests - before; n != 1 {
		t.Errorf("ReadTail took %d requests, want 1", n)
	}
	// A missing bucket: a bare 404 from the emulator, so an absent object
	// (GCS itself says NoSuchBucket: TestNoSuchBucket).
	nb, _, _ := openStore(t, opts, "gs://nobucket/p")
	if _, err := nb.ReadAt("p/d/a", make([]byte, 4), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing bucket: %v, want fs.ErrNotExist", err)
	}
	err := openNode(t, opts, "gs://nobucket/x.zarr")
	if want := "zarr: gs://nobucket/x.zarr: not found: no zarr.json, .zarray or .zgroup"; err.Error() != want {
		t.Errorf("a missing bucket's node: %v; want %s", err, want)
	}
}

// TestGCSAuth reads from the emulator, through a proxy that records the
// Authorization header of each request: none when anonymous; with a
// service-account key whose token_uri is a loopback token server, the
// token, the JWT exchanged once.
func TestGCSAuth(t *testing.T) {
	leakCheck(t)
	g, data := gcsEmulator(t)
	target, _ := url.Parse(g.Endpoint)
	var mu sync.Mutex
	var auths []string
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		r.Host = target.Host // the emulator's public host
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	var tokens int
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.Form.Get("assertion") == "" {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		mu.Lock()
		tokens++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"access_token":"tok-1","token_type":"Bearer","expires_in":3600}`))
	}))
	defer tokenSrv.Close()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "reader@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokenSrv.URL + "/token",
	})
	file := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(file, sa, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name string
		gcs  remote.GCSOptions
		auth string
	}{
		{"anonymous", remote.GCSOptions{Endpoint: front.URL, Anonymous: true}, ""},
		{"service account", remote.GCSOptions{Endpoint: front.URL, CredentialsFile: file}, "Bearer tok-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			auths = nil
			mu.Unlock()
			opts := fastOptions()
			opts.GCS = tt.gcs
			st, _, _ := openStore(t, opts, "gs://bkt/p")
			checkReads(t, st, "p/", data)
			mu.Lock()
			defer mu.Unlock()
			if len(auths) == 0 {
				t.Fatal("no request went through the proxy")
			}
			for _, a := range auths {
				if a != tt.auth {
					t.Fatalf("a request carried Authorization %q, want %q", a, tt.auth)
				}
			}
		})
	}
	if tokens != 1 {
		t.Errorf("%d token exchanges, want 1", tokens)
	}
}

// TestGCSFaults: what the emulator cannot produce, through the fault
// server standing in for GCS's XML API: 503 and 429 are retried, a 403 is
// not and says the request was anonymous.
func TestGCSFaults(t *testing.T) {
	leakCheck(t)
	dir, data := testObjects(t) // bucket "d": objects "a", "small", ...
	srv := remotetest.NewFaultServer(t, dir, false)
	opts := fastOptions()
	opts.GCS = remote.GCSOptions{Endpoint: srv.URL, Anonymous: true}
	st, _, _ := openStore(t, opts, "gs://d")
	srv.Inject(remotetest.Fault{Kind: remotetest.Status503, Path: "/d/a", Times: 2})
	srv.Inject(remotetest.Fault{Kind: remotetest.TooMany, Path: "/d/small", Times: 1})
	p := make([]byte, 1000)
	if n, err := st.ReadAt("a", p, 10); err != nil || n != len(p) || string(p) != string(data["d/a"][10:1010]) {
		t.Errorf("ReadAt(a) after two 503s = %d, %v", n, err)
	}
	if b, err := st.ReadObject("small", 100); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadObject(small) after a 429 = %q, %v", b, err)
	}
	if a, s := srv.Count("/d/a"), srv.Count("/d/small"); a != 3 || s != 2 {
		t.Errorf("%d and %d requests, want 3 and 2: %q", a, s, srv.Requests())
	}
	srv.Inject(remotetest.Fault{Kind: remotetest.Forbidden, Path: "/d/empty"})
	_, err := st.ReadAt("empty", p, 0)
	if !errors.Is(err, fs.ErrPermission) || srv.Count("/d/empty") != 1 {
		t.Errorf("a 403: %v after %d requests, want fs.ErrPermission after 1", err, srv.Count("/d/empty"))
	}
	if _, err := zarr.InspectStore(st, ""); !errors.Is(err, zarr.ErrNotFound) {
		t.Errorf("a bucket without zarr metadata: %v, want zarr.ErrNotFound", err)
	}
}
