package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// smokeHost is the smoke scenario on the host engine.
func smokeHost(t *testing.T) *Scenario {
	t.Helper()
	sc, err := LoadScenario("smoke")
	if err != nil {
		t.Fatal(err)
	}
	sc.Run.Engine = "host"
	// The runs compare the chunks decoded after the warm-up's stats
	// reset, which count what the engine had not decoded by then: with
	// two slots it cannot be far ahead; with three, how far depends on
	// the store's speed (150 chunks over HTTP against 168 locally).
	sc.Run.Config.BatchSlots = 2
	return sc
}

// readBoxes reads a --boxes-out file.
func readBoxes(t *testing.T, file string) boxSet {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bs boxSet
	if err := json.Unmarshal(b, &bs); err != nil {
		t.Fatal(err)
	}
	return bs
}

// checkRemoteRun checks a run over a remote copy against a run over the
// local dataset: the same boxes and bytes, batch 0 verified, the data
// source reported, and the GET replay in place of the pread replay.
func checkRemoteRun(t *testing.T, rep, local *Report, boxes, localBoxes, uri, scheme, endpoint string) {
	t.Helper()
	c := rep.Stats.Counters
	switch {
	case rep.DatasetDir != uri || rep.Generated || !rep.Verified:
		t.Errorf("dataset %s, generated %v, verified %v; want %s, false, true", rep.DatasetDir, rep.Generated, rep.Verified, uri)
	case rep.Data == nil || rep.Data.Scheme != scheme || rep.Data.Endpoint != endpoint || rep.Data.Concurrency != 64:
		t.Errorf("data source %+v; want %s at %s, 64 in flight", rep.Data, scheme, endpoint)
	case c["remote_requests"] < c["read_ops"] || c["read_ops"] == 0:
		t.Errorf("%d requests for %d read ops", c["remote_requests"], c["read_ops"])
	case c["output_bytes"] != local.Stats.Counters["output_bytes"] || c["chunks_decoded"] != local.Stats.Counters["chunks_decoded"]:
		t.Errorf("output %d bytes from %d chunks; the local run %d from %d", c["output_bytes"], c["chunks_decoded"],
			local.Stats.Counters["output_bytes"], local.Stats.Counters["chunks_decoded"])
	case rep.CeilingError != "":
		t.Errorf("ceilings: %s", rep.CeilingError)
	case rep.CPU <= 0:
		t.Errorf("CPU time %v over the measured batches", rep.CPU)
	}
	var names []string
	for _, cl := range rep.Ceilings {
		names = append(names, cl.Name)
		if cl.GBps <= 0 || cl.Bytes <= 0 {
			t.Errorf("ceiling %+v", cl)
		}
		if cl.Name == "GET replay" && (!cl.Limits || cl.OutputGBps <= 0 || !strings.Contains(cl.Detail, "64 in flight")) {
			t.Errorf("GET replay %+v", cl)
		}
	}
	if want := []string{"GET replay", "decode-only (cpu)", "assemble-only (cpu)"}; !slices.Equal(names, want) {
		t.Errorf("ceilings %v; want %v", names, want)
	}
	rb, lb := readBoxes(t, boxes), readBoxes(t, localBoxes)
	if rb.DatasetDir != uri || !slices.Equal(rb.Arrays, lb.Arrays) || len(rb.Samples) == 0 {
		t.Errorf("boxes of %s over %v; want %s over %v", rb.DatasetDir, rb.Arrays, uri, lb.Arrays)
	}
	rj, _ := json.Marshal(rb.Samples)
	lj, _ := json.Marshal(lb.Samples)
	if !bytes.Equal(rj, lj) {
		t.Error("the remote run read other boxes than the local one")
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if want := "dataset      " + uri + " (" + scheme + " at " + endpoint; !strings.Contains(text.String(), want) {
		t.Errorf("report does not say %q:\n%s", want, text.String())
	}
}

// TestRunRemote runs the smoke scenario over an http:// copy of its
// dataset (Go's file server), and over an s3:// copy when there is a
// MinIO, and compares each with the run over the local files.
func TestRunRemote(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	sc := smokeHost(t)
	local, _ := runScenario(t, sc, Options{Data: data, BoxesOut: filepath.Join(dir, "local.json")})
	srv := remotetest.NewFaultServer(t, dir, false)
	uri := srv.URL + "/data"
	rep, _ := runScenario(t, smokeHost(t), Options{Data: uri + "/", Verify: true, Ceilings: true, BoxesOut: filepath.Join(dir, "http.json")})
	checkRemoteRun(t, rep, local, filepath.Join(dir, "http.json"), filepath.Join(dir, "local.json"), uri, "http", srv.URL)
	if n := srv.Count("/damacy-dataset.json"); n != 1 {
		t.Errorf("the marker was read %d times; want once", n)
	}

	t.Run("s3", func(t *testing.T) {
		if testing.Short() {
			t.Skip("MinIO takes seconds to start")
		}
		m := remotetest.StartMinIO(t)
		m.CreateBucket(t, "bench")
		t.Setenv("DAMACY_S3_ENDPOINT", m.Endpoint)
		t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
		t.Setenv("AWS_REGION", "us-east-1")
		var stderr bytes.Buffer
		e := Env{Stderr: &stderr}
		if err := UploadDataset(context.Background(), e, &sc.Dataset, data, "s3://bench/smoke"); err != nil {
			t.Fatal(err)
		}
		if err := UploadDataset(context.Background(), e, &sc.Dataset, data, "s3://bench/smoke/"); err != nil {
			t.Fatal(err)
		}
		if got := stderr.String(); !strings.Contains(got, "uploaded") || !strings.Contains(got, "s3://bench/smoke already holds this dataset") {
			t.Errorf("upload messages: %q", got)
		}
		rep, _ := runScenario(t, smokeHost(t), Options{Data: "s3://bench/smoke", Verify: true, Ceilings: true, BoxesOut: filepath.Join(dir, "s3.json")})
		checkRemoteRun(t, rep, local, filepath.Join(dir, "s3.json"), filepath.Join(dir, "local.json"), "s3://bench/smoke", "s3", m.Endpoint)

		other := smokeHost(t)
		other.Dataset.Seed++
		err := UploadDataset(context.Background(), e, &other.Dataset, filepath.Join(dir, "other"), "s3://bench/smoke")
		if err == nil || !strings.Contains(err.Error(), "holds a different dataset") {
			t.Errorf("upload over another dataset: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "other")); err == nil {
			t.Error("the refused upload generated its dataset first")
		}
		_, err = Run(context.Background(), Env{Stderr: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, smokeHost(t), Options{Data: "s3://bench/nothing"})
		if err == nil || !strings.Contains(err.Error(), "s3://bench/nothing holds no damacy dataset") || !strings.Contains(err.Error(), "damacy gen smoke s3://bench/nothing") {
			t.Errorf("run over an empty prefix: %v", err)
		}
	})

	// The refusals: no marker, another dataset's marker, --drop-cache.
	quiet := Env{Stderr: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), quiet, smokeHost(t), Options{Data: srv.URL + "/empty"})
	if err == nil || !strings.Contains(err.Error(), "holds no damacy dataset") || !strings.Contains(err.Error(), "damacy gen smoke DIR") {
		t.Errorf("run over a directory without a dataset: %v", err)
	}
	other := smokeHost(t)
	other.Dataset.Entropy = 0.25
	_, err = Run(context.Background(), quiet, other, Options{Data: uri})
	if err == nil || !strings.Contains(err.Error(), "holds a different dataset than scenario smoke's") {
		t.Errorf("run over another dataset: %v", err)
	}
	_, err = Run(context.Background(), quiet, smokeHost(t), Options{Data: uri, DropCache: true})
	if err == nil || !strings.Contains(err.Error(), "--drop-cache") {
		t.Errorf("--drop-cache over http: %v", err)
	}
	_, err = Run(context.Background(), quiet, smokeHost(t), Options{Data: "ftp://host/data"})
	if err == nil || !strings.Contains(err.Error(), "s3://, gs://, http:// or https://") {
		t.Errorf("an ftp:// dataset: %v", err)
	}
}

// TestGetReplayRequests: the GET replay merges a batch's chunks of one
// object as the pipeline merges a wave's (gaps up to plan.RemoteGapBytes,
// spans up to plan.RemoteSpanBytes), never across batches or objects, and
// stages only the chunks.
func TestGetReplayRequests(t *testing.T) {
	const gap, span = plan.RemoteGapBytes, plan.RemoteSpanBytes
	ref := func(key string, off, n int64) chunkRef {
		return chunkRef{file: key, chunk: zarr.Chunk{Key: key, Offset: off, Length: n}}
	}
	rp := &replanned{batches: [][]chunkRef{
		{
			ref("a", 0, 100), ref("a", 100+gap, 100), // a gap at the cap: one GET
			ref("a", 201+2*gap, 100),                                       // one byte more: another
			ref("b", 301+2*gap, 100),                                       // another object
			ref("c", 0, span-10), ref("c", span-10, 10), ref("c", span, 1), // the span cap
		},
		{ref("a", 0, 100)}, // another batch
	}}
	reqs := getReplayRequests(rp, plan.GETMerge{Gap: gap, Span: span})
	var got []string
	for _, q := range reqs {
		got = append(got, fmt.Sprintf("%s:%d:%d:%d", q.key, len(q.chunks), q.bytes, q.wanted))
	}
	want := []string{"a:2:" + fmt.Sprint(200+gap) + ":200", "a:1:100:100", "b:1:100:100", "c:2:" + fmt.Sprint(span) + ":" + fmt.Sprint(span), "c:1:1:1", "a:1:100:100"}
	if !slices.Equal(got, want) {
		t.Errorf("GETs %v; want %v", got, want)
	}
	wanted := getReplayStage(reqs)
	if wanted != 500+span+1 {
		t.Errorf("%d bytes wanted; want %d", wanted, 500+span+1)
	}
	for _, q := range reqs {
		for k, r := range q.ranges {
			if r.Off != q.chunks[k].off || int64(len(r.Buf)) != q.chunks[k].len {
				t.Errorf("range %d of %s: %d bytes at %d; want chunk %+v", k, q.key, len(r.Buf), r.Off, q.chunks[k])
			}
		}
	}
}

func TestRemoteJoin(t *testing.T) {
	for uri, want := range map[string]string{
		"s3://bucket/p/q":                "s3://bucket/p/q/a001",
		"s3://bucket":                    "s3://bucket/a001",
		"https://h:8/d/x?sig=a%2Fb&t=1":  "https://h:8/d/x/a001?sig=a%2Fb&t=1",
		"http://127.0.0.1:9/data%20sets": "http://127.0.0.1:9/data%20sets/a001",
	} {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		if got := (&remoteData{base: u}).join("a001"); got != want {
			t.Errorf("join(%s, a001) = %s, want %s", uri, got, want)
		}
	}
}
