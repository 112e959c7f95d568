package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

// Object stores (s3://, gs://, http(s)://) are read through zarr/remote:
// the metadata cache opens every sample URI through one remote.Opener per
// pipeline (local paths come back as zarr.DirStores and keep the pread
// path), and the IO stage reads a wave's ops on remote sources as ranged
// GETs, up to Config.IOConcurrency in flight, straight into the staging
// slab.

// newStores returns the pipeline's opener of sample URIs.
func newStores(cfg Config) *remote.Opener {
	o, err := remote.NewOpener(cfg.Remote)
	if err != nil {
		// Config.withDefaults has validated cfg.Remote.
		panic(err)
	}
	return o
}

// openURI resolves a sample URI to its store and node path.
func (m *metaCache) openURI(uri string) (zarr.Store, string, error) {
	return m.stores.Open(context.Background(), uri)
}

// remoteReq is one ranged GET: neighbouring read ops of one object.
type remoteReq struct {
	src    *source
	key    string
	ranges []remote.Range
	bytes  int64 // bytes the GET transfers, gaps included
}

// hasRemote reports whether any read op is on an object store.
func hasRemote(reads []readOp) bool {
	for i := range reads {
		if reads[i].src.obj != nil {
			return true
		}
	}
	return false
}

// groupRemote merges the remote read ops into GETs (in wave order, which
// is by source, key and offset; by m) and lists the local ones.
func groupRemote(reads []readOp, slab []byte, m plan.GETMerge) (reqs []remoteReq, local []readOp) {
	for i := range reads {
		r := &reads[i]
		if r.src.obj == nil {
			local = append(local, *r)
			continue
		}
		rg := remote.Range{Off: r.offset, Buf: slab[r.slabOff : r.slabOff+r.length]}
		if n := len(reqs); n > 0 {
			q := &reqs[n-1]
			last := q.ranges[len(q.ranges)-1]
			end := last.Off + int64(len(last.Buf))
			if q.src == r.src && q.key == r.key && m.Joins(q.ranges[0].Off, end, r.offset, r.length) {
				q.ranges = append(q.ranges, rg)
				q.bytes = r.offset + r.length - q.ranges[0].Off
				continue
			}
		}
		reqs = append(reqs, remoteReq{src: r.src, key: r.key, ranges: []remote.Range{rg}, bytes: r.length})
	}
	return reqs, local
}

// readRemote runs a wave that has ops on object stores: their GETs on the
// GET lanes (Config.IOConcurrency in flight, over all the waves being
// read), the local ops on the IO workers alongside. The first failure
// cancels the rest.
func (s *stages) readRemote(ctx context.Context, w *wave, reads []readOp, slab []byte) error {
	t := time.Now()
	reqs, local := groupRemote(reads, slab, plan.GETMerge{Gap: s.cfg.RemoteGapBytes, Span: s.cfg.RemoteSpanBytes})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	var n, transferred int64
	for _, r := range local {
		n += r.length
	}
	transferred = n
	if len(local) > 0 {
		wg.Go(func() {
			if _, err := s.preads(ctx, w, local, slab); err != nil {
				fail(err)
			}
		})
	}
issue:
	for i := range reqs {
		q := &reqs[i]
		for _, rg := range q.ranges {
			n += int64(len(rg.Buf))
		}
		transferred += q.bytes
		var lane int
		select {
		case lane = <-s.gets:
		case <-ctx.Done():
			break issue
		}
		wg.Go(func() {
			defer func() { s.gets <- lane }()
			t0 := time.Now()
			err := q.src.obj.ReadRanges(ctx, q.key, q.ranges)
			if s.trace != nil {
				s.trace.span(Span{Stage: "read", Lane: fmt.Sprintf("remote %d", lane), Batch: w.batch.req.id, Wave: w.index, Start: t0, End: time.Now(), Bytes: q.bytes})
			}
			if err != nil {
				fail(remoteReadError(q, err))
			}
		})
	}
	wg.Wait()
	err := first
	if err == nil {
		err = ctx.Err() // only the caller's context can have ended it
	}
	rs := s.meta.stores.Stats()
	s.stats.update(func(st *Stats) {
		st.IO.add(time.Since(t), transferred, n)
		st.ReadOps += int64(len(local) + len(reqs))
		st.BytesRead += transferred
		s.meta.remoteSeen.sync(st, rs)
	})
	return err
}

// remoteReadError maps a failed GET onto the pipeline's kinds: an object
// shorter than its shard index says is a truncated shard (ErrDecode), as
// for local files; anything else, a 403 or a 404 included, is ErrStorage,
// naming the sample's URI (and the error the object's).
func remoteReadError(q *remoteReq, err error) error {
	at, key := q.ranges[0].Off, q.src.rel(q.key)
	var re *remote.Error
	if !errors.As(err, &re) && errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf("read", ErrDecode, q.src.uri, "%s: truncated: %w", q.key, err).inChunk(key, at, q.bytes)
	}
	return newError("read", ErrStorage, q.src.uri, fmt.Errorf("%s: %w", q.key, err)).inChunk(key, at, q.bytes)
}

// remoteCounters folds the opener's request counters into Stats: it keeps
// what was already added, so each sync adds the difference.
type remoteCounters struct {
	mu   sync.Mutex
	seen remote.Stats
}

func (c *remoteCounters) sync(st *Stats, now remote.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.RemoteRequests += max(now.Requests-c.seen.Requests, 0)
	st.RemoteRetries += max(now.Retries-c.seen.Retries, 0)
	c.seen = now
}
