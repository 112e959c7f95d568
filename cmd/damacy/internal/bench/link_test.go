package bench

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/netshape"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// readGETs reads a --gets-out file, refusing unknown fields.
func readGETs(t *testing.T, file string) GETList {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var l GETList
	if err := strictJSON(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRunLink runs the smoke scenario over http:// through a shaped link
// and writes its GETs: the same bytes as the local run, every request
// through the proxy, the link's use reported; the GET list is the GET
// replay's, and a wider gap merges more.
func TestRunLink(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	local, _ := runScenario(t, smokeHost(t), Options{Data: data})
	srv := remotetest.NewFaultServer(t, dir, false)
	uri := srv.URL + "/data"
	link := netshape.Link{RTT: 2 * time.Millisecond, BitsPerSecond: 4e9}
	gets := filepath.Join(dir, "gets.json")
	rep, _ := runScenario(t, smokeHost(t), Options{Data: uri, Link: &link, Ceilings: true, GetsOut: gets, Verify: true})
	c := rep.Stats.Counters
	switch {
	case !rep.Verified || c["output_bytes"] != local.Stats.Counters["output_bytes"]:
		t.Errorf("verified %v, output %d bytes; the local run %d", rep.Verified, c["output_bytes"], local.Stats.Counters["output_bytes"])
	case rep.Data == nil || rep.Data.Endpoint != srv.URL || rep.Data.Link != link.String():
		t.Errorf("data source %+v; want %s through %s", rep.Data, srv.URL, link)
	case rep.Data.GapBytes != plan.RemoteGapBytes || rep.Data.SpanBytes != plan.RemoteSpanBytes:
		t.Errorf("data source %+v; want the default merge", rep.Data)
	// The link's bytes and the pipeline's are counted at different
	// moments (a GET as it arrives, a wave when its last GET is in), so
	// over the measured batches they agree only roughly.
	case rep.Link == nil || rep.Link.Down < c["bytes_read"]/2 || rep.Link.Down > 2*c["bytes_read"]+1<<20 || rep.Link.Up <= 0 || rep.Link.Conns < 1:
		t.Errorf("link %+v; want about the %d bytes read down", rep.Link, c["bytes_read"])
	case rep.Link.Busy <= 0 || rep.Link.Busy > 1.5 || rep.Link.RTT != link.RTT: // a short window can take in what the link held before it
		t.Errorf("link %+v: busy %.3f", rep.Link, rep.Link.Busy)
	}
	var replay *Ceiling
	for i := range rep.Ceilings {
		if rep.Ceilings[i].Name == "GET replay" {
			replay = &rep.Ceilings[i]
		}
	}
	if replay == nil || !strings.Contains(replay.Note, "the link") {
		t.Errorf("GET replay %+v; want the link's use in its note", replay)
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "link         "+link.String()+" through a loopback proxy") {
		t.Errorf("the report does not name the link:\n%s", text.String())
	}

	l := readGETs(t, gets)
	switch {
	case l.Dataset != uri || l.Scheme != "http" || l.Bucket != "" || l.Batches != rep.Batches:
		t.Errorf("GET list of %s (%s, bucket %q), %d batches; want %s, http, %d", l.Dataset, l.Scheme, l.Bucket, l.Batches, uri, rep.Batches)
	case len(l.GETs) == 0 || l.Bytes < l.ChunkBytes || l.ChunkBytes <= 0 || replay == nil || l.Bytes != replay.Bytes:
		t.Errorf("%d GETs of %d bytes (%d of chunks); the replay read %+v", len(l.GETs), l.Bytes, l.ChunkBytes, replay)
	case l.GapBytes != plan.RemoteGapBytes || l.SpanBytes != plan.RemoteSpanBytes:
		t.Errorf("merge %d / %d; want the defaults", l.GapBytes, l.SpanBytes)
	}
	var sum int64
	for _, g := range l.GETs {
		if g[0] < 0 || g[0] >= int64(len(l.Keys)) || g[1] < 0 || g[2] <= 0 {
			t.Fatalf("GET %v over %d keys", g, len(l.Keys))
		}
		// Keys are paths on the server, which serves dir.
		if fi, err := os.Stat(filepath.Join(dir, l.Keys[g[0]])); err != nil || g[1]+g[2] > fi.Size() {
			t.Fatalf("GET %v of %s: past the file (%v)", g, l.Keys[g[0]], err)
		}
		sum += g[2]
	}
	if sum != l.Bytes {
		t.Errorf("the GETs sum to %d bytes; the list says %d", sum, l.Bytes)
	}

	// A gap as wide as a shard merges at least as much, without the link
	// and without the ceilings.
	wide := smokeHost(t)
	wide.Run.Config.RemoteGapBytes = 64 << 20
	rep, _ = runScenario(t, wide, Options{Data: uri, GetsOut: gets})
	w := readGETs(t, gets)
	if rep.Link != nil || rep.Data.GapBytes != 64<<20 || w.GapBytes != 64<<20 || len(w.GETs) > len(l.GETs) || w.ChunkBytes != l.ChunkBytes || w.Bytes < l.Bytes {
		t.Errorf("gap 64 MiB: link %v, source %+v, %d GETs of %d bytes (%d of chunks); gap 256 KiB: %d of %d (%d)",
			rep.Link, rep.Data, len(w.GETs), w.Bytes, w.ChunkBytes, len(l.GETs), l.Bytes, l.ChunkBytes)
	}

	// Refusals: a local dataset, an https server.
	for _, tt := range []struct {
		data string
		o    Options
		want string
	}{
		{data, Options{GetsOut: gets}, "apply to a remote dataset"},
		{data, Options{Link: &link}, "apply to a remote dataset"},
		{remotetest.NewFaultServer(t, dir, true).URL + "/data", Options{Link: &link}, "plain http only"},
	} {
		tt.o.Data = tt.data
		_, err := Run(t.Context(), Env{Stderr: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, smokeHost(t), tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run over %s with %+v: %v; want %q", tt.data, tt.o, err, tt.want)
		}
	}
}

// TestGETMergeScenario: run.config.remote_gap_bytes and remote_span_bytes
// reach the pipeline's Config and the replay's rule; 0 means the defaults
// (their ranges are the pipeline's to check).
func TestGETMergeScenario(t *testing.T) {
	sc := smokeHost(t)
	if m := getMerge(sc); m != (plan.GETMerge{Gap: plan.RemoteGapBytes, Span: plan.RemoteSpanBytes}) {
		t.Errorf("default merge %+v", m)
	}
	if cfg := pipelineConfig(sc); cfg.RemoteGapBytes != 0 || cfg.RemoteSpanBytes != 0 {
		t.Errorf("Config %d / %d; want 0 (the pipeline's defaults)", cfg.RemoteGapBytes, cfg.RemoteSpanBytes)
	}
	var r RunSpec
	if err := decodeRun("t", []byte(`{"config": {"remote_gap_bytes": "1MiB", "remote_span_bytes": 33554432}}`), &r, len(sc.Dataset.Shape)); err != nil {
		t.Fatal(err)
	}
	sc.Run.Config.RemoteGapBytes, sc.Run.Config.RemoteSpanBytes = r.Config.RemoteGapBytes, r.Config.RemoteSpanBytes
	if m, cfg := getMerge(sc), pipelineConfig(sc); m != (plan.GETMerge{Gap: 1 << 20, Span: 32 << 20}) || cfg.RemoteGapBytes != 1<<20 || cfg.RemoteSpanBytes != 32<<20 {
		t.Errorf("merge %+v, Config %d / %d; want 1 MiB / 32 MiB", m, cfg.RemoteGapBytes, cfg.RemoteSpanBytes)
	}
}
