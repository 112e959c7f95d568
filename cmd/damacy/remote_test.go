package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// TestRemoteURIs runs inspect and read on the test stores through
// http://, s3:// (MinIO) and gs:// (the GCS emulator), when there are
// servers, and requires the output of the local paths.
func TestRemoteURIs(t *testing.T) {
	dir := t.TempDir()
	makeStores(t, dir)
	srv := remotetest.NewFaultServer(t, dir, false)
	bases := map[string]string{"http": srv.URL}
	if _, skip, err := remotetest.MinIOBinary(); err == nil && skip == "" && !testing.Short() {
		m := remotetest.StartMinIO(t)
		m.CreateBucket(t, "cli")
		m.Upload(t, dir, "s3://cli/stores")
		t.Setenv("DAMACY_S3_ENDPOINT", m.Endpoint)
		t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
		t.Setenv("AWS_REGION", "us-east-1")
		bases["s3"] = "s3://cli/stores"
		// gen writes to s3:// through a temporary directory.
		mustRun(t, append(append([]string(nil), smallGen...), "smoke", "s3://cli/gen")...)
		out, _ := mustRun(t, "inspect", "--json", "s3://cli/gen/a002")
		var r inspectResult
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.NGFF == nil || r.NGFF.Storage.Objects == 0 {
			t.Errorf("inspect of a generated image on s3://: %v\n%s", err, out)
		}
		// gen --local keeps the local copy; bench reads the uploaded one,
		// and refuses a copy of another dataset.
		local := filepath.Join(t.TempDir(), "smoke")
		_, errs := mustRun(t, "gen", "--local", local, "smoke", "s3://cli/smoke")
		if !strings.Contains(errs, "wrote 1 image to "+local) || !strings.Contains(errs, "uploaded") {
			t.Errorf("gen --local: %s", errs)
		}
		if _, err := os.Stat(filepath.Join(local, "damacy-dataset.json")); err != nil {
			t.Errorf("gen --local did not keep the dataset: %v", err)
		}
		out, _ = mustRun(t, "bench", "--json", "--engine", "host", "--ceilings=false", "--io-concurrency", "8", "--data", "s3://cli/smoke", "smoke")
		var rep struct {
			DatasetDir string `json:"dataset_dir"`
			Data       struct {
				Scheme      string `json:"scheme"`
				Concurrency int    `json:"concurrency"`
			} `json:"data_source"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.DatasetDir != "s3://cli/smoke" || rep.Data.Scheme != "s3" || rep.Data.Concurrency != 8 {
			t.Errorf("bench over s3://: %v %+v", err, rep)
		}
		code, _, errs := runCmd(t, "bench", "--engine", "host", "--data", "s3://cli/gen", "smoke")
		if code != exitError || !strings.Contains(errs, "holds a different dataset") {
			t.Errorf("bench over another dataset: exit %d, %s", code, errs)
		}
	} else {
		t.Log("s3:// not tried: no MinIO binary (make minio)")
	}
	if _, skip, err := remotetest.FakeGCSBinary(); err == nil && skip == "" {
		g := remotetest.StartFakeGCS(t)
		g.CreateBucket(t, "cli")
		g.Upload(t, dir, "gs://cli/stores")
		t.Setenv("DAMACY_GCS_ENDPOINT", g.Endpoint)
		t.Setenv("DAMACY_GCS_ANONYMOUS", "1")
		bases["gs"] = "gs://cli/stores"
	} else {
		t.Log("gs:// not tried: no fake-gcs-server binary (make fake-gcs)")
	}
	for scheme, base := range bases {
		t.Run(scheme, func(t *testing.T) {
			for _, name := range []string{"image.ome.zarr", "plain.zarr", "v2.zarr"} {
				local, _ := mustRun(t, "inspect", "--json", filepath.Join(dir, name))
				remote, _ := mustRun(t, "inspect", "--json", base+"/"+name)
				var lr, rr inspectResult
				if err := json.Unmarshal([]byte(local), &lr); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal([]byte(remote), &rr); err != nil {
					t.Fatal(err)
				}
				lr.Path, rr.Path = "", ""
				lj, _ := json.Marshal(lr)
				rj, _ := json.Marshal(rr)
				if !bytes.Equal(lj, rj) {
					t.Errorf("inspect %s/%s:\n%s\nlocal:\n%s", base, name, rj, lj)
				}
			}
			for _, c := range readCases(dir) {
				mustRun(t, c.args()...)
				_, _, want := parseNPY(t, c.NPY)
				rel, _ := filepath.Rel(dir, c.path)
				c.path = base + "/" + filepath.ToSlash(rel)
				c.NPY = strings.TrimSuffix(c.NPY, ".npy") + "-" + scheme + ".npy"
				mustRun(t, c.args()...)
				_, _, got := parseNPY(t, c.NPY)
				if !bytes.Equal(got, want) {
					t.Errorf("read %s: %s differs from the local read", c.Name, c.path)
				}
			}
		})
	}
	code, _, errs := runCmd(t, "inspect", srv.URL+"/nothing.zarr")
	if code != exitError || !strings.Contains(errs, "not found") {
		t.Errorf("inspect of a missing URI: exit %d, %s", code, errs)
	}
}
