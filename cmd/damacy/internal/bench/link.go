package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/netshape"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/remote"
)

// A remote dataset's server can be moved away, as far as its bytes are
// concerned (--link RTT,RATE): the run starts a loopback proxy
// (package netshape) that delays each direction by half the round trip
// and caps its bandwidth, and every request of the run (the pipeline's,
// the ceilings', the marker's) goes through it. The report then says how
// busy the run kept the link. And the GETs the GET replay issues can be
// written to a file (--gets-out) for a load generator on another client
// stack to issue the same (cmd/damacy/peers/getload).

// getMerge is the rule the run's pipeline merges a remote dataset's
// reads by (run.config.remote_gap_bytes, remote_span_bytes; pipeline.Config's
// RemoteGapBytes and RemoteSpanBytes).
func getMerge(sc *Scenario) plan.GETMerge {
	m := plan.GETMerge{Gap: int64(sc.Run.Config.RemoteGapBytes), Span: int64(sc.Run.Config.RemoteSpanBytes)}
	if m.Gap == 0 {
		m.Gap = plan.RemoteGapBytes
	}
	if m.Span == 0 {
		m.Span = plan.RemoteSpanBytes
	}
	return m
}

// shape puts a proxy shaped as link between the run and the dataset's
// server, and reopens the dataset's store through it.
func (rd *remoteData) shape(ctx context.Context, sc *Scenario, link netshape.Link) error {
	ep, err := url.Parse(rd.endpoint)
	if err != nil || ep.Host == "" {
		return fmt.Errorf("--link: the endpoint of %s: %q is not a URL", rd.uri, rd.endpoint)
	}
	if ep.Scheme != "http" {
		return fmt.Errorf("--link: %s is reached over %s; a shaped link carries plain http only (a certificate would not name the proxy)", rd.endpoint, ep.Scheme)
	}
	port := ep.Port()
	if port == "" {
		port = "80"
	}
	px, err := netshape.Listen(net.JoinHostPort(ep.Hostname(), port), link)
	if err != nil {
		return err
	}
	proxied := "http://" + px.Addr()
	opts := remote.Options{Concurrency: ioConcurrency(sc)}
	base := *rd.base
	switch rd.scheme {
	case "s3":
		opts.S3.Endpoint = proxied
	case "gs":
		opts.GCS.Endpoint = proxied
	default:
		base.Host = px.Addr()
	}
	o, err := remote.NewOpener(opts)
	if err != nil {
		px.Close()
		return err
	}
	st, p, err := o.Open(ctx, base.String())
	if err != nil {
		o.Close()
		px.Close()
		return err
	}
	rd.opener.Close()
	rd.opener, rd.store, rd.path, rd.base, rd.proxy, rd.opts = o, st.(*remote.Store), p, &base, px, opts
	return nil
}

// route points a pipeline configuration's object-store requests where
// the run's own go: through the shaped link when there is one.
func (rd *remoteData) route(cfg *pipeline.Config) {
	if rd == nil || rd.proxy == nil {
		return
	}
	cfg.Remote.S3.Endpoint = rd.opts.S3.Endpoint
	cfg.Remote.GCS.Endpoint = rd.opts.GCS.Endpoint
}

// linkStats returns the shaped link's counters (zero without one).
func (rd *remoteData) linkStats() netshape.Stats {
	if rd == nil || rd.proxy == nil {
		return netshape.Stats{}
	}
	return rd.proxy.Stats()
}

// LinkReport is the shaped link a remote dataset was read through
// (--link), over the measured batches.
type LinkReport struct {
	Link          string        `json:"link"` // in words
	RTT           time.Duration `json:"rtt_ns"`
	BitsPerSecond float64       `json:"bits_per_second"` // each way; 0: no cap
	Down          int64         `json:"down_bytes"`      // server to loader
	Up            int64         `json:"up_bytes"`        // loader to server
	DownGBps      float64       `json:"down_gbps"`
	// Busy is Down / (the link's bytes per second x the wall time): the
	// share of its capacity the run used; 0 without a cap.
	Busy  float64 `json:"busy"`
	Conns int64   `json:"conns"` // connections through the link over the whole run
}

// newLinkReport describes the link's use between two snapshots of its
// counters, wall apart.
func newLinkReport(l netshape.Link, before, after netshape.Stats, wall time.Duration) *LinkReport {
	r := &LinkReport{
		Link: l.String(), RTT: l.RTT, BitsPerSecond: l.BitsPerSecond,
		Down: after.Down - before.Down, Up: after.Up - before.Up, Conns: after.Conns,
	}
	r.DownGBps = float64(r.Down) / wall.Seconds() / 1e9
	r.Busy = linkBusy(l, r.Down, wall)
	return r
}

// linkBusy is the share of the link's capacity that n bytes over wall
// used; 0 without a cap.
func linkBusy(l netshape.Link, n int64, wall time.Duration) float64 {
	if l.BitsPerSecond <= 0 || wall <= 0 {
		return 0
	}
	return float64(n) * 8 / l.BitsPerSecond / wall.Seconds()
}

// GETList is the file --gets-out writes: the GETs of the GET replay, in
// the order it issues them, for a load generator to issue the same.
type GETList struct {
	Dataset    string `json:"dataset"` // the URI (query values masked)
	Scheme     string `json:"scheme"`
	Bucket     string `json:"bucket,omitempty"` // s3:// and gs://
	GapBytes   int64  `json:"gap_bytes"`        // the merge rule (run.config.remote_gap_bytes, remote_span_bytes)
	SpanBytes  int64  `json:"span_bytes"`
	Batches    int    `json:"batches"`     // the measured batches they fetch
	Bytes      int64  `json:"bytes"`       // transferred, gaps included
	ChunkBytes int64  `json:"chunk_bytes"` // of which chunks
	// Keys are the objects, as keys in the bucket (paths on an http(s)
	// server); each GET is [index in Keys, offset, length].
	Keys []string   `json:"keys"`
	GETs [][3]int64 `json:"gets"`
}

// writeGETs writes reqs, merged by m, to file as a GETList.
func writeGETs(file string, rd *remoteData, reqs []getReq, m plan.GETMerge, batches int) error {
	l := GETList{Dataset: remote.Redact(rd.uri), Scheme: rd.scheme, GapBytes: m.Gap, SpanBytes: m.Span, Batches: batches}
	if rd.scheme == "s3" || rd.scheme == "gs" {
		l.Bucket = rd.base.Host
	}
	index := map[string]int64{}
	for _, q := range reqs {
		k, ok := index[q.key]
		if !ok {
			k = int64(len(l.Keys))
			index[q.key] = k
			l.Keys = append(l.Keys, q.key)
		}
		l.GETs = append(l.GETs, [3]int64{k, q.chunks[0].off, q.bytes})
		l.Bytes += q.bytes
		l.ChunkBytes += q.wanted
	}
	b, err := json.Marshal(&l)
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, b, 0o666); err != nil {
		return fmt.Errorf("--gets-out: %w", err)
	}
	return nil
}
