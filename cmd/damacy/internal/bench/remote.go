package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cmd/damacy/internal/netshape"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/remote"
)

// A run's dataset may be a copy on an object store or a web server
// (--data s3://..., gs://..., http(s)://...): the run then checks the
// copy's marker file instead of generating, the pipeline reads the
// samples' URIs there, and the ceilings that need local files give way to
// a GET replay through the same kind of store.

// openDataset makes sure the run's dataset is there, and draws the boxes
// over it: a local dataset is generated when it is absent; a remote one
// must be the scenario's (checkMarker).
func openDataset(ctx context.Context, e Env, sc *Scenario, o Options) (*boxSet, *genSummary, error) {
	loc := sc.dataDir(o.Data)
	if isRemote(loc) {
		if o.DropCache {
			return nil, nil, fmt.Errorf("--drop-cache drops local files from the page cache; %s is read from its server, whose caches are its own", loc)
		}
		rd, err := openRemoteData(ctx, sc, loc, o.Link)
		if err != nil {
			return nil, nil, err
		}
		bs, err := newBoxSet(sc, "", rd, nil)
		if err == nil {
			err = bs.draw(ctx, sc)
		}
		if err != nil {
			rd.close()
			return nil, nil, err
		}
		return bs, &genSummary{Dir: rd.uri, Images: sc.Dataset.Arrays}, nil
	}
	if sc.array != nil {
		if o.Data != "" {
			return nil, nil, fmt.Errorf("--data names a scenario's dataset; %s is read as it is", sc.array.path)
		}
		bs, err := newBoxSet(sc, sc.Dataset.Dir, nil, nil)
		if err != nil {
			return nil, nil, err
		}
		return bs, &genSummary{Dir: sc.array.path, Images: 1}, bs.draw(ctx, sc)
	}
	dir, err := localPath(loc)
	if err != nil {
		return nil, nil, err
	}
	gs, err := ensureDataset(ctx, e, &sc.Dataset, dir, false)
	if err != nil {
		return nil, nil, err
	}
	bs, err := newBoxSet(sc, dir, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	return bs, gs, bs.draw(ctx, sc)
}

// remoteData is a run's remote dataset: where it is, and the store the
// bench itself reads it through (its marker, the metadata the ceilings
// plan with, and the GET replay).
type remoteData struct {
	uri      string   // without a trailing slash
	base     *url.URL // uri parsed (its host the proxy's, for http(s) through a shaped link)
	scheme   string
	endpoint string // the server's (store.Endpoint before any shaped link)
	opener   *remote.Opener
	store    *remote.Store
	path     string // the dataset's path within the store

	// proxy, when the run reads through a shaped link (--link), carries
	// every request; opts are the opener's options that point at it.
	proxy *netshape.Proxy
	opts  remote.Options
}

// isRemote reports whether a dataset location is an object store or web
// server rather than a local directory (file:// URIs are local).
func isRemote(loc string) bool {
	return remote.IsURI(loc) && !strings.HasPrefix(strings.ToLower(loc), "file:")
}

// localPath returns the local path of a directory or file:// URI.
func localPath(loc string) (string, error) {
	if !remote.IsURI(loc) {
		return loc, nil
	}
	u, err := url.Parse(loc)
	if err != nil {
		return "", err
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("%s: a file URI names a local path (file:///path), not host %q", loc, u.Host)
	}
	return u.Path, nil
}

// ioConcurrency is the number of object-store requests the run keeps in
// flight: the scenario's, or the pipeline's default.
func ioConcurrency(sc *Scenario) int {
	if sc.Run.Config.IOConcurrency > 0 {
		return sc.Run.Config.IOConcurrency
	}
	return pipeline.DefaultIOConcurrency
}

// openRemoteData opens the dataset at uri, through a link shaped as link
// when it is not nil, and checks, through its marker file, that it is the
// scenario's dataset.
func openRemoteData(ctx context.Context, sc *Scenario, uri string, link *netshape.Link) (*remoteData, error) {
	uri = strings.TrimRight(uri, "/")
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("--data %s: %w", uri, err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "s3", "gs", "http", "https":
	default:
		return nil, fmt.Errorf("--data %s: a dataset is read from a local directory or an s3://, gs://, http:// or https:// URI", uri)
	}
	o, err := remote.NewOpener(remote.Options{Concurrency: ioConcurrency(sc)})
	if err != nil {
		return nil, err
	}
	st, p, err := o.Open(ctx, uri)
	if err != nil {
		o.Close()
		return nil, err
	}
	rd := &remoteData{uri: uri, base: u, scheme: scheme, opener: o, store: st.(*remote.Store), path: p}
	rd.endpoint = rd.store.Endpoint()
	if link != nil {
		if err := rd.shape(ctx, sc, *link); err != nil {
			rd.close()
			return nil, err
		}
	}
	if err := rd.checkMarker(&sc.Dataset, sc.Name); err != nil {
		rd.close()
		return nil, err
	}
	return rd, nil
}

// checkMarker reads the dataset's marker file and compares it with the
// one damacy gen writes for d.
func (rd *remoteData) checkMarker(d *DatasetSpec, scenario string) error {
	got, err := rd.store.ReadObject(rd.key(markerFile), 1<<20)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		how := fmt.Sprintf("write it there with `damacy gen %s %s`", scenario, rd.uri)
		if rd.scheme != "s3" {
			how = fmt.Sprintf("serve or copy there a directory written by `damacy gen %s DIR`", scenario)
		}
		return fmt.Errorf("%s holds no damacy dataset (no %s there): %s", rd.uri, markerFile, how)
	case err != nil:
		return fmt.Errorf("reading the dataset's marker: %w", err)
	case !bytes.Equal(got, marker(d)):
		return fmt.Errorf("%s holds a different dataset than scenario %s's (see its %s); write this one elsewhere with `damacy gen %s URI`",
			rd.uri, scenario, markerFile, scenario)
	}
	return nil
}

// join returns the URI of a path relative to the dataset (before the
// query of an http(s):// URI, which every request carries).
func (rd *remoteData) join(rel string) string {
	u := *rd.base
	u.Path, u.RawPath = path.Join("/", u.Path, rel), ""
	return u.String()
}

// key is the store key of a path relative to the dataset.
func (rd *remoteData) key(rel string) string { return path.Join(rd.path, rel) }

func (rd *remoteData) close() {
	if rd != nil {
		rd.opener.Close()
		if rd.proxy != nil {
			rd.proxy.Close()
		}
	}
}

// DataSource says where a remote dataset was read from.
type DataSource struct {
	Scheme      string `json:"scheme"`
	Endpoint    string `json:"endpoint"`
	Concurrency int    `json:"concurrency"`    // requests in flight at most
	GapBytes    int64  `json:"gap_bytes"`      // the largest gap one GET bridges (run.config.remote_gap_bytes)
	SpanBytes   int64  `json:"span_bytes"`     // the most one GET spans (run.config.remote_span_bytes)
	Link        string `json:"link,omitempty"` // the shaped link read through (--link), in words
}

// source says where the boxes' dataset is read from, and how; nil when
// local.
func (bs *boxSet) source(sc *Scenario) *DataSource {
	rd := bs.remote
	if rd == nil {
		return nil
	}
	m := getMerge(sc)
	ds := &DataSource{Scheme: rd.scheme, Endpoint: rd.endpoint, Concurrency: rd.opener.Concurrency(), GapBytes: m.Gap, SpanBytes: m.Span}
	if rd.proxy != nil {
		ds.Link = rd.proxy.Link().String()
	}
	return ds
}

// getReq is one GET of the replay: neighbouring chunks of one object.
type getReq struct {
	key    string
	chunks []readRange    // the chunks wanted, by offset (file is key)
	ranges []remote.Range // their places in the staging buffer (getReplayStage)
	bytes  int64          // the span the GET transfers, gaps included
	wanted int64          // the chunks' bytes
}

// getReplayRequests lists the GETs of every measured batch: each batch's
// chunks (each once, sorted by object and offset) merged by m, as the
// pipeline's IO stage merges a wave's reads on an object store.
func getReplayRequests(rp *replanned, m plan.GETMerge) []getReq {
	var out []getReq
	for _, refs := range rp.batches {
		start := len(out)
		for _, r := range refs {
			c := readRange{file: r.file, off: r.chunk.Offset, len: r.chunk.Length}
			if n := len(out); n > start {
				q := &out[n-1]
				last := q.chunks[len(q.chunks)-1]
				end := last.off + last.len
				if q.key == c.file && m.Joins(q.chunks[0].off, end, c.off, c.len) {
					q.chunks = append(q.chunks, c)
					q.bytes = c.off + c.len - q.chunks[0].off
					q.wanted += c.len
					continue
				}
			}
			out = append(out, getReq{key: c.file, chunks: []readRange{c}, bytes: c.len, wanted: c.len})
		}
	}
	return out
}

// getReplayStage places the chunks of the GETs one after another in a
// buffer of up to replayStageBytes (wrapping to its start), as
// replayStage does for the pread replay, and returns the bytes wanted.
func getReplayStage(reqs []getReq) int64 {
	var total, maxLen int64
	for _, q := range reqs {
		total += q.wanted
		maxLen = max(maxLen, q.wanted)
	}
	size := max(min(total, replayStageBytes), maxLen)
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	var at int64
	for i := range reqs {
		q := &reqs[i]
		if at+q.wanted > size {
			at = 0
		}
		q.ranges = make([]remote.Range, len(q.chunks))
		for k, c := range q.chunks {
			q.ranges[k] = remote.Range{Off: c.off, Buf: buf[at : at+c.len]}
			at += c.len
		}
	}
	return total
}

// getReplay is the remote dataset's counterpart of the pread replay: the
// chunks the measured boxes need, batch by batch, fetched with the GETs
// the pipeline would issue for them (reqs, getReplayRequests) through the
// same kind of store, as many in flight as the run had (io_concurrency),
// into a staging buffer. Its rate counts the bytes transferred, gaps
// included, as the run's read bytes do; scale.getReplay turns it into
// output bytes.
func getReplay(ctx context.Context, rd *remoteData, rg *rig, reqs []getReq, tr *tracer) (Ceiling, error) {
	wanted := getReplayStage(reqs)
	before, link := rd.opener.Stats(), rd.linkStats()
	var n atomic.Int64
	t, cpu := time.Now(), processCPU()
	err := rg.io.Run(ctx, len(reqs), func(i int) error {
		q := &reqs[i]
		if err := rd.store.ReadRanges(ctx, q.key, q.ranges); err != nil {
			return err
		}
		n.Add(q.bytes)
		return nil
	}, nil)
	el, cpu := time.Since(t), processCPU()-cpu
	tr.span(traceRowPhases, "ceiling", "GET replay", t, t.Add(el), map[string]any{"gets": len(reqs), "bytes": n.Load()})
	if err != nil {
		return Ceiling{}, fmt.Errorf("GET replay: %w", err)
	}
	after := rd.opener.Stats()
	got := n.Load()
	c := Ceiling{
		Name: "GET replay", Of: "read", Bytes: got, Time: el, Limits: true, Start: t, CPU: cpu,
		Detail: fmt.Sprintf("%d in flight, %d GETs of %s (%.0f%% of it chunks)", rg.io.Size(), len(reqs),
			base.FormatBytes(got/int64(max(len(reqs), 1))), 100*float64(wanted)/float64(max(got, 1))),
	}
	if r := after.Retries - before.Retries; r > 0 {
		c.Note = fmt.Sprintf("%d retries", r)
	}
	if el > 0 {
		c.Note = strings.TrimPrefix(c.Note+fmt.Sprintf("; client CPU %.1f cores", cpu.Seconds()/el.Seconds()), "; ")
	}
	if rd.proxy != nil && rd.proxy.Link().BitsPerSecond > 0 {
		busy := linkBusy(rd.proxy.Link(), rd.linkStats().Down-link.Down, el)
		c.Note = strings.TrimPrefix(c.Note+fmt.Sprintf("; the link %.0f%% busy", 100*busy), "; ")
	}
	c.GBps = float64(got) / el.Seconds() / 1e9
	return c, nil
}

// UploadDataset makes sure the s3:// URI dst holds the dataset d (as
// damacy gen SCENARIO s3://... does): when dst's marker file says so
// already, nothing is done; otherwise the dataset is generated in the
// local directory dir (or taken from there when dir already holds it) and
// uploaded, the marker last, so that its presence means the upload is
// complete. A dst that holds a different dataset is refused.
func UploadDataset(ctx context.Context, e Env, d *DatasetSpec, dir, dst string) error {
	dst = strings.TrimRight(dst, "/")
	o, err := remote.NewOpener(remote.Options{})
	if err != nil {
		return err
	}
	defer o.Close()
	st, p, err := o.Open(ctx, dst)
	if err != nil {
		return err
	}
	got, err := st.(*remote.Store).ReadObject(path.Join(p, markerFile), 1<<20)
	switch {
	case err == nil && bytes.Equal(got, marker(d)):
		fmt.Fprintf(e.Stderr, "damacy: %s already holds this dataset; nothing to do\n", dst)
		return nil
	case err == nil:
		return fmt.Errorf("%s holds a different dataset (see its %s); remove it or choose another path", dst, markerFile)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading %s's marker: %w", dst, err)
	}
	if err := EnsureDataset(ctx, e, d, dir); err != nil {
		return err
	}
	t := time.Now()
	if err := o.Upload(ctx, dir, dst, markerFile); err != nil {
		return err
	}
	size, err := diskBytes(dir)
	if err != nil {
		return err
	}
	el := time.Since(t)
	fmt.Fprintf(e.Stderr, "damacy: uploaded %s to %s in %.1f s (%s/s)\n", base.FormatBytes(size), dst, el.Seconds(),
		base.FormatBytes(int64(float64(size)/max(el.Seconds(), 1e-9))))
	return nil
}
