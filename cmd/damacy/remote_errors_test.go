package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// secret is the value of the credentials in the test URIs' queries: no
// output may show it.
const secret = "s3cr3t-SIGNATURE"

const (
	presigned = "?X-Amz-Credential=AKIA" + secret + "&X-Amz-Signature=" + secret + "&token=" + secret
	masked    = "?X-Amz-Credential=***&X-Amz-Signature=***&token=***"
)

// noSecret fails t if any of the texts shows the secret.
func noSecret(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("%s shows a secret:\n%s", what, s)
		}
	}
}

// TestRemoteErrorMessages runs inspect and read as a new user would on
// stores that cannot be read, and requires the whole of stderr: a refused
// connection (http:// with a presigned query, s3:// with the endpoint from
// the environment), a missing bucket and a missing node (MinIO). read
// opens the array before its pipeline does: its errors are the store's.
func TestRemoteErrorMessages(t *testing.T) {
	for _, v := range []string{"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		t.Setenv(v, "/nonexistent")
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_REGION", "us-east-1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out := filepath.Join(t.TempDir(), "out.npy")
	http := "http://" + addr + "/x.zarr"
	refused := addr + " refused the connection (after 6 attempts)"
	type tc struct {
		name string
		args []string
		env  string // DAMACY_S3_ENDPOINT
		want string
	}
	cases := []tc{
		{"inspect refused", []string{"inspect", http + presigned}, "",
			"damacy inspect: error: remote: GET " + http + "/zarr.json: " + refused},
		{"read refused", []string{"read", http + presigned, "--box", "0:2,0:2", "-o", out}, "",
			"damacy read: error: remote: GET " + http + "/zarr.json: " + refused},
		{"read f32 refused", []string{"read", http + presigned, "--box", "0:2,0:2", "--dtype", "f32", "--engine", "host", "-o", out}, "",
			"damacy read: error: remote: GET " + http + "/zarr.json: " + refused},
		{"inspect s3 refused", []string{"inspect", "s3://bucket/x.zarr"}, "http://" + addr,
			"damacy inspect: error: remote: GET s3://bucket/x.zarr/zarr.json: the S3 endpoint " + addr + " (from DAMACY_S3_ENDPOINT) refused the connection (after 6 attempts)"},
	}
	if _, skip, err := remotetest.MinIOBinary(); err == nil && skip == "" && !testing.Short() {
		m := remotetest.StartMinIO(t)
		m.CreateBucket(t, "cli")
		t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
		host := strings.TrimPrefix(m.Endpoint, "http://")
		cases = append(cases,
			tc{"inspect no bucket", []string{"inspect", "s3://nobucket/x.zarr"}, m.Endpoint,
				`damacy inspect: error: remote: GET s3://nobucket/x.zarr/zarr.json: 404 Not Found (NoSuchBucket): the bucket "nobucket" does not exist at the S3 endpoint ` + host + ` (from DAMACY_S3_ENDPOINT)`},
			tc{"read no bucket", []string{"read", "s3://nobucket/x.zarr", "--box", "0:2,0:2", "--dtype", "bf16", "--engine", "host", "-o", out}, m.Endpoint,
				`damacy read: error: remote: GET s3://nobucket/x.zarr/zarr.json: 404 Not Found (NoSuchBucket): the bucket "nobucket" does not exist at the S3 endpoint ` + host + ` (from DAMACY_S3_ENDPOINT)`},
			tc{"inspect no node", []string{"inspect", "s3://cli/x.zarr"}, m.Endpoint,
				"damacy inspect: error: zarr: s3://cli/x.zarr: not found: no zarr.json, .zarray or .zgroup"})
	} else {
		t.Log("MinIO cases not run: no MinIO binary (make minio)")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("DAMACY_S3_ENDPOINT", c.env)
			code, stdout, stderr := runCmd(t, c.args...)
			if code != exitError || stdout != "" || stderr != c.want+"\n" {
				t.Errorf("damacy %s: exit %d\nstdout: %q\nstderr: %s\nwant exit %d and\n        %s", c.args[0], code, stdout, stderr, exitError, c.want)
			}
			noSecret(t, "damacy "+c.args[0], stdout, stderr)
		})
	}
}

// TestRemoteNoSecrets reads a store, and benchmarks a dataset, through
// http:// URIs with a presigned query, and requires that nothing the
// command writes (results, messages, the report, the trace) shows the
// query's values.
func TestRemoteNoSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and benchmarks a dataset")
	}
	dir := t.TempDir()
	makeStores(t, dir)
	data := filepath.Join(dir, "smoke")
	mustRun(t, "gen", "smoke", data)
	srv := remotetest.NewFaultServer(t, dir, false)
	uri := srv.URL + "/plain.zarr" + presigned
	stdout, stderr := mustRun(t, "inspect", "--json", uri)
	noSecret(t, "inspect", stdout, stderr)
	var r inspectResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || r.Path != srv.URL+"/plain.zarr"+masked {
		t.Errorf("inspect's path %q (%v), want the URI with its query's values masked", r.Path, err)
	}
	out := filepath.Join(t.TempDir(), "out.npy")
	stdout, stderr = mustRun(t, "read", uri, "--box", "0:4,0:4", "--dtype", "f32", "--engine", "host", "-o", out)
	noSecret(t, "read", stdout, stderr)

	trace := filepath.Join(t.TempDir(), "trace.json")
	stdout, stderr = mustRun(t, "bench", "--json", "--engine", "host", "--ceilings=false", "--trace", trace, "--data", srv.URL+"/smoke"+presigned, "smoke")
	tr, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "bench", stdout, stderr, string(tr))
	var rep struct {
		DatasetDir string `json:"dataset_dir"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.DatasetDir != srv.URL+"/smoke"+masked {
		t.Errorf("bench's dataset_dir %q (%v), want the URI with its query's values masked", rep.DatasetDir, err)
	}
	// A failed bench names the URI masked too.
	code, stdout, stderr := runCmd(t, "bench", "--engine", "host", "--ceilings=false", "--data", srv.URL+"/nothing"+presigned, "smoke")
	if code != exitError || !strings.Contains(stderr, srv.URL+"/nothing"+masked) {
		t.Errorf("bench of a URI without a dataset: exit %d, %s", code, stderr)
	}
	noSecret(t, "a failed bench", stdout, stderr)
}
