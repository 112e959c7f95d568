// Command getload issues a damacy bench run's ranged GETs against an
// S3-compatible server through another client stack (minio-go), at one
// or more concurrencies, and reports what the server gave: GB/s, GETs per
// second, latency percentiles and the client's own CPU time. It measures
// the server's GET ceiling for the run's request sizes apart from damacy's
// client (zarr/remote's plain-HTTP GETs, SigV4-signed there).
//
//	damacy bench --data s3://bucket/bench/throughput --gets-out gets.json throughput
//	getload --gets gets.json --concurrency 32,64,128,256 --duration 10s --json
//
// The GET list is damacy bench's --gets-out file: the GET replay's
// requests, in its order, each an object key, an offset and a length. The
// endpoint and credentials come from the environment as for damacy
// (DAMACY_S3_ENDPOINT or AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_REGION) unless given as flags.
//
// This is a module of its own, so that damacy's module does not depend on
// minio-go: build it with `make getload` (or `go build` in this
// directory).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const usage = `usage: getload --gets FILE [flags]

Issues the ranged GETs of FILE (damacy bench --gets-out) against an
S3-compatible server with minio-go, CONCURRENCY at a time, once per
concurrency given: from the list's start, until its end or --duration.
Each point first issues 2 x CONCURRENCY GETs unmeasured, to open the
connections. Results go to stdout, one line per point (--json: one
document).

With --raw ADDR the same GETs go over plain TCP to a raw server
(getload --serve-raw ADDR), as 16-byte requests answered with the
bytes alone: the kernel's cost of moving the bytes in those pieces at
that concurrency, the floor under any HTTP client. --rcvlowat N sets
SO_RCVLOWAT to min(N, the read's size) before each read of 64 KiB or
more (a response body's or a raw reply's), so a reader wakes for N bytes
rather than for each piece the server writes (plain http:// or --raw
only: TLS reads ask for more than a record holds).

Flags:
`

// getList is damacy bench's --gets-out file (bench.GETList).
type getList struct {
	Dataset    string     `json:"dataset"`
	Scheme     string     `json:"scheme"`
	Bucket     string     `json:"bucket"`
	GapBytes   int64      `json:"gap_bytes"`
	SpanBytes  int64      `json:"span_bytes"`
	Batches    int        `json:"batches"`
	Bytes      int64      `json:"bytes"`
	ChunkBytes int64      `json:"chunk_bytes"`
	Keys       []string   `json:"keys"`
	GETs       [][3]int64 `json:"gets"`
}

// point is the result of one concurrency.
type point struct {
	Concurrency int       `json:"concurrency"`
	Start       time.Time `json:"start"` // of the measured GETs
	GETs        int64     `json:"gets"`
	Bytes       int64     `json:"bytes"`
	WallS       float64   `json:"wall_s"`
	GBps        float64   `json:"gbps"` // bytes / wall, GB = 1e9 B
	GETsPerS    float64   `json:"gets_per_s"`
	CPUS        float64   `json:"cpu_s"`        // this process, user and system
	Cores       float64   `json:"cores"`        // CPUS / WallS
	CPUSPerGB   float64   `json:"cpu_s_per_gb"` // CPUS per GB fetched
	P50MS       float64   `json:"p50_ms"`       // a GET's time, request to last byte
	P90MS       float64   `json:"p90_ms"`
	P99MS       float64   `json:"p99_ms"`
	MaxMS       float64   `json:"max_ms"`
	Complete    bool      `json:"complete"` // the whole list was issued (not cut by --duration)
	Reads       int64     `json:"reads"`    // reads of the connections that returned bytes
	ReadBytes   float64   `json:"read_bytes_mean"`
}

// result is the --json document.
type result struct {
	Gets        string  `json:"gets_file"`
	Dataset     string  `json:"dataset"`
	Endpoint    string  `json:"endpoint"`
	Bucket      string  `json:"bucket"`
	ListGETs    int     `json:"list_gets"`
	ListBytes   int64   `json:"list_bytes"`
	MeanGET     int64   `json:"mean_get_bytes"`
	GapBytes    int64   `json:"gap_bytes"`
	SpanBytes   int64   `json:"span_bytes"`
	Client      string  `json:"client"`
	DurationCap float64 `json:"duration_cap_s"`
	Points      []point `json:"points"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("getload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	gets := fs.String("gets", "", "the GET list (damacy bench --gets-out)")
	endpoint := fs.String("endpoint", firstEnv("DAMACY_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"), "the server's URL")
	bucket := fs.String("bucket", "", "the bucket (default: the list's)")
	region := fs.String("region", firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"), "the region requests are signed for (default us-east-1)")
	conc := fs.String("concurrency", "64", "GETs in flight: one number, or a list (32,64,128,256), one point each")
	duration := fs.Duration("duration", 0, "stop a point after this long (0: the whole list)")
	asJSON := fs.Bool("json", false, "write the result as one JSON document")
	profile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the measured GETs here")
	raw := fs.String("raw", "", "issue the GETs over plain TCP to this raw server (host:port) instead of S3")
	serve := fs.String("serve-raw", "", "serve raw GETs on this address (host:port; port 0 picks one), until interrupted")
	writeSize := fs.Int("write-size", 0, "with --serve-raw: write each reply in pieces of this many bytes (0: one write)")
	lowat := fs.Int("rcvlowat", 0, "wake a large read for this many bytes (SO_RCVLOWAT; 0: the kernel's default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "getload: "+format+"\n", a...)
		return code
	}
	if *writeSize < 0 || *lowat < 0 {
		return fail(2, "--write-size and --rcvlowat: want 0 or more")
	}
	if *serve != "" {
		if fs.NArg() != 0 {
			fs.Usage()
			return 2
		}
		ln, err := net.Listen("tcp", *serve)
		if err != nil {
			return fail(1, "%v", err)
		}
		fmt.Fprintf(stdout, "getload: serving raw GETs on %s\n", ln.Addr())
		if err := serveRaw(ctx, ln, *writeSize); err != nil {
			return fail(1, "%v", err)
		}
		return 0
	}
	if *gets == "" || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	var levels []int
	for f := range strings.SplitSeq(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return fail(2, "--concurrency %q: want numbers in 1..4096, separated by commas", *conc)
		}
		levels = append(levels, n)
	}
	if *duration < 0 {
		return fail(2, "--duration %v: want 0 or more", *duration)
	}
	l, err := readList(*gets)
	if err != nil {
		return fail(1, "%v", err)
	}
	var (
		counts readCount
		f      fetcher
		host   = *raw
		client = fmt.Sprintf("raw TCP (SO_RCVLOWAT %d)", *lowat)
	)
	if *raw != "" {
		rc := &rawClient{addr: *raw, lowat: *lowat, n: &counts}
		defer rc.close()
		f = func(ctx context.Context, w int, g [3]int64, buf []byte) error { return rc.get(ctx, w, g[1], buf) }
	} else {
		if *bucket == "" {
			*bucket = l.Bucket
		}
		if *bucket == "" {
			return fail(2, "%s lists GETs of a %s:// dataset, not of a bucket: give --bucket", *gets, l.Scheme)
		}
		if *region == "" {
			*region = "us-east-1"
		}
		c, h, err := newClient(*endpoint, *region, slices.Max(levels), &counts, *lowat)
		if err != nil {
			return fail(1, "%v", err)
		}
		f = func(ctx context.Context, _ int, g [3]int64, buf []byte) error {
			return get(ctx, c, *bucket, l.Keys[g[0]], g[1], buf)
		}
		host, client = h, fmt.Sprintf("minio-go v7.4.1 (Core.GetObject, SO_RCVLOWAT %d)", *lowat)
	}
	res := result{
		Gets: *gets, Dataset: l.Dataset, Endpoint: host, Bucket: *bucket, ListGETs: len(l.GETs), ListBytes: l.Bytes,
		GapBytes: l.GapBytes, SpanBytes: l.SpanBytes, Client: client, DurationCap: duration.Seconds(),
	}
	if len(l.GETs) > 0 {
		res.MeanGET = l.Bytes / int64(len(l.GETs))
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "getload: %d GETs of %s on average (%s in all) from %s through %s\n",
			len(l.GETs), formatBytes(res.MeanGET), formatBytes(l.Bytes), host, client)
	}
	var stopProfile func()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return fail(1, "%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fail(1, "%v", err)
		}
		stopProfile = func() {
			pprof.StopCPUProfile()
			f.Close()
		}
		defer stopProfile()
	}
	for _, n := range levels {
		p, err := measure(ctx, f, &counts, l, n, *duration)
		if err != nil {
			return fail(1, "%d in flight: %v", n, err)
		}
		res.Points = append(res.Points, p)
		if !*asJSON {
			fmt.Fprintf(stdout, "getload: %4d in flight: %8.3f GB/s, %8.0f GETs/s (%d GETs, %s, %.2f s%s), CPU %.1f s = %.2f cores = %.2f s per GB; GET p50 %.1f ms, p90 %.1f, p99 %.1f, max %.1f; %s per read\n",
				n, p.GBps, p.GETsPerS, p.GETs, formatBytes(p.Bytes), p.WallS, cut(p.Complete), p.CPUS, p.Cores, p.CPUSPerGB, p.P50MS, p.P90MS, p.P99MS, p.MaxMS, formatBytes(int64(p.ReadBytes)))
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", " ")
		if err := enc.Encode(&res); err != nil {
			return fail(1, "%v", err)
		}
	}
	return 0
}

func cut(complete bool) string {
	if complete {
		return ""
	}
	return ", cut by --duration"
}

// readList reads and checks a GET list.
func readList(file string) (*getList, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var l getList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(l.GETs) == 0 {
		return nil, fmt.Errorf("%s lists no GETs", file)
	}
	for i, g := range l.GETs {
		if g[0] < 0 || g[0] >= int64(len(l.Keys)) || g[1] < 0 || g[2] < 1 || g[2] > 1<<30 {
			return nil, fmt.Errorf("%s: GET %d (%v) names no key of %d or no bytes", file, i, g, len(l.Keys))
		}
	}
	return &l, nil
}

// newClient makes a minio-go client of endpoint (path-style, signed with
// the environment's credentials) whose transport keeps conns idle
// connections to it, as damacy's keeps one per request in flight.
func newClient(endpoint, region string, conns int, rc *readCount, lowat int) (*minio.Core, string, error) {
	if endpoint == "" {
		return nil, "", errors.New("no endpoint: give --endpoint or set DAMACY_S3_ENDPOINT")
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", fmt.Errorf("endpoint %q: want http://host:port or https://host:port", endpoint)
	}
	if lowat > 0 && u.Scheme == "https" {
		return nil, "", errors.New("--rcvlowat: for http:// endpoints only (TLS reads ask for more than a record holds)")
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || secret == "" {
		return nil, "", errors.New("no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = conns
	tr.DisableCompression = true
	tr.ForceAttemptHTTP2 = false
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		pc, err := probe(c, rc, lowat)
		if err != nil {
			c.Close()
			return nil, err
		}
		return pc, nil
	}
	c, err := minio.NewCore(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(id, secret, os.Getenv("AWS_SESSION_TOKEN")),
		Secure:       u.Scheme == "https",
		Transport:    tr,
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, "", err
	}
	return c, u.Host, nil
}

// measure issues the list's GETs, n at a time, from its start until its
// end or d (when positive), after 2n unmeasured ones.
func measure(ctx context.Context, f fetcher, rc *readCount, l *getList, n int, d time.Duration) (point, error) {
	warm := min(2*n, len(l.GETs))
	if _, err := issue(ctx, f, l.GETs[len(l.GETs)-warm:], n, 0); err != nil {
		return point{}, fmt.Errorf("warm-up: %w", err)
	}
	cpu0, reads0, bytes0 := processCPU(), rc.reads.Load(), rc.bytes.Load()
	t0 := time.Now()
	r, err := issue(ctx, f, l.GETs, n, d)
	wall := time.Since(t0)
	cpu := processCPU() - cpu0
	if err != nil {
		return point{}, err
	}
	p := point{Concurrency: n, Start: t0, GETs: int64(len(r.times)), Bytes: r.bytes, WallS: wall.Seconds(), CPUS: cpu.Seconds(), Complete: r.complete}
	p.GBps = float64(p.Bytes) / p.WallS / 1e9
	if p.Reads = rc.reads.Load() - reads0; p.Reads > 0 {
		p.ReadBytes = float64(rc.bytes.Load()-bytes0) / float64(p.Reads)
	}
	p.GETsPerS = float64(p.GETs) / p.WallS
	p.Cores = p.CPUS / p.WallS
	if p.Bytes > 0 {
		p.CPUSPerGB = p.CPUS / (float64(p.Bytes) / 1e9)
	}
	slices.Sort(r.times)
	q := func(f float64) float64 {
		return float64(r.times[min(int(f*float64(len(r.times))), len(r.times)-1)]) / 1e6
	}
	p.P50MS, p.P90MS, p.P99MS, p.MaxMS = q(0.5), q(0.9), q(0.99), q(1)
	return p, nil
}

// issued is what issue did: the bytes, each GET's time, and whether it
// got through the whole list.
type issued struct {
	bytes    int64
	times    []time.Duration
	complete bool
}

// fetcher reads GET g (key, offset, length) into buf, for worker w.
type fetcher func(ctx context.Context, w int, g [3]int64, buf []byte) error

// issue runs the GETs, n at a time (each worker takes the next one), until
// they are done or d passed (when positive); the first error stops it.
func issue(ctx context.Context, f fetcher, gets [][3]int64, n int, d time.Duration) (issued, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	var next, total atomic.Int64
	times := make([][]time.Duration, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			var buf []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(len(gets)) || ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				g := gets[i]
				if int64(cap(buf)) < g[2] {
					buf = make([]byte, g[2])
				}
				t := time.Now()
				if err := f(ctx, w, g, buf[:g[2]]); err != nil {
					cancel(err)
					return
				}
				times[w] = append(times[w], time.Since(t))
				total.Add(g[2])
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return issued{}, err
	}
	var all []time.Duration
	for _, t := range times {
		all = append(all, t...)
	}
	return issued{bytes: total.Load(), times: all, complete: next.Load() >= int64(len(gets))}, nil
}

// get reads len(buf) bytes of key at off into buf with one ranged GET.
func get(ctx context.Context, c *minio.Core, bucket, key string, off int64, buf []byte) error {
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(buf))-1); err != nil {
		return err
	}
	body, _, _, err := c.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return fmt.Errorf("GET %s/%s bytes %d-%d: %w", bucket, key, off, off+int64(len(buf))-1, err)
	}
	defer body.Close()
	if _, err := io.ReadFull(body, buf); err != nil {
		return fmt.Errorf("GET %s/%s bytes %d-%d: %w", bucket, key, off, off+int64(len(buf))-1, err)
	}
	return nil
}

// processCPU is this process's CPU time, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// formatBytes writes n with a decimal unit.
func formatBytes(n int64) string {
	f := float64(n)
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", f/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
