package remote_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/damacy-go/damacy/zarr/remote"
)

// gcsServer stands in for GCS's XML API on loopback: objects of bucket
// "bkt" at /bkt/KEY, with Range support, recording the Authorization
// header of each request.
type gcsServer struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newGCSServer(t *testing.T, data map[string][]byte) *gcsServer {
	dir := t.TempDir()
	for k, v := range data {
		p := filepath.Join(dir, "bkt", "p", filepath.FromSlash(k))
		os.MkdirAll(filepath.Dir(p), 0o777)
		if err := os.WriteFile(p, v, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	s := &gcsServer{}
	files := http.FileServer(http.Dir(dir))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		s.mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestGCSAnonymous reads gs://bkt/p with no credentials: no Authorization
// header is sent.
func TestGCSAnonymous(t *testing.T) {
	leakCheck(t)
	_, data := testObjects(t)
	srv := newGCSServer(t, data)
	opts := fastOptions()
	opts.GCS = remote.GCSOptions{Endpoint: srv.URL, Anonymous: true}
	st, path, _ := openStore(t, opts, "gs://bkt/p")
	if path != "p" || st.URI("p/d/a") != "gs://bkt/p/d/a" {
		t.Fatalf("path %q, URI %q", path, st.URI("p/d/a"))
	}
	checkReads(t, st, "p/", data)
	for _, a := range srv.auths {
		if a != "" {
			t.Fatalf("anonymous request carried Authorization %q", a)
		}
	}
}

// TestGCSServiceAccount reads with a service-account key whose token_uri
// is a loopback token server: the JWT is exchanged once, and every request
// carries the token.
func TestGCSServiceAccount(t *testing.T) {
	leakCheck(t)
	_, data := testObjects(t)
	srv := newGCSServer(t, data)
	var tokens int
	var mu sync.Mutex
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
	opts := fastOptions()
	opts.GCS = remote.GCSOptions{Endpoint: srv.URL, CredentialsFile: file}
	st, _, _ := openStore(t, opts, "gs://bkt/p")
	checkReads(t, st, "p/", data)
	for _, a := range srv.auths {
		if a != "Bearer tok-1" {
			t.Fatalf("request carried Authorization %q, want the token", a)
		}
	}
	if tokens != 1 {
		t.Errorf("%d token exchanges, want 1", tokens)
	}
}
