package plan

// Coalescing of object-store reads (s3://, gs://, http(s)://). The ops of
// a wave on one object (already merged with the local gap and size caps)
// are merged further into one ranged GET while the gap between two is at
// most GETMerge.Gap and the GET spans at most GETMerge.Span (by default
// RemoteGapBytes and RemoteSpanBytes). A GET costs a round trip (tens of
// milliseconds on S3), while 256 KiB of gap stream past in a few
// milliseconds and are discarded, never staged. The span cap keeps a
// wave's bytes spread over many requests in flight: one S3 stream gives
// 50-100 MB/s, so throughput comes from concurrency.
//
// The pipeline's IO stage and damacy bench's GET replay both merge by
// these.
const (
	RemoteGapBytes  = 256 << 10
	RemoteSpanBytes = 8 << 20
)

// GETMerge is the rule that merges reads of one object into one ranged
// GET (pipeline.Config.RemoteGapBytes and RemoteSpanBytes).
type GETMerge struct {
	Gap  int64 // the largest gap a GET bridges
	Span int64 // the most bytes one GET spans, gaps included
}

// Joins reports whether a read of [off, off+length) may join a GET of the
// same object that starts at start and ends at end (the end of its last
// read): it lies after that end, within m.Gap of it, and the GET would
// then span at most m.Span.
func (m GETMerge) Joins(start, end, off, length int64) bool {
	return off >= end && off-end <= m.Gap && off+length-start <= m.Span
}
