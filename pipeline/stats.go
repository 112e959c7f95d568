package pipeline

import (
	"sync"
	"time"
)

// Metric is one stage's accumulated measurements since the last StatsReset.
type Metric struct {
	Time     time.Duration // total busy time of the stage
	Best     time.Duration // shortest single unit of work (0: none yet)
	InBytes  int64         // bytes the stage consumed
	OutBytes int64         // bytes the stage produced
	Count    int64         // units of work (waves, reads, batches: per stage)
}

func (m *Metric) add(d time.Duration, in, out int64) {
	m.Time += d
	if m.Best == 0 || d < m.Best {
		m.Best = d
	}
	m.InBytes += in
	m.OutBytes += out
	m.Count++
}

// Stats is a snapshot of the pipeline's counters. Stage metrics and
// counters are monotonic since New or the last StatsReset; gauges
// (marked) are current values.
type Stats struct {
	Engine  string // "cuda" or "host"
	Decoder string // what decodes chunks: "nvcomp x.y.z + cpu", "cpu"

	Plan           Metric // box -> chunk jobs, read ops and copy ops, per batch
	IO             Metric // reads into staging; InBytes = bytes read
	Check          Metric // host checks of the chunks routed to nvCOMP, per wave: checksums, frame headers, LZ4 walks (CUDA engine); InBytes = bytes checked
	H2D            Metric // host-to-device copies of staging (CUDA engine)
	Decompress     Metric // chunk decode; InBytes compressed, OutBytes decoded
	Assemble       Metric // gather + cast into batch slots; OutBytes = batch bytes
	PopWaitIO      Metric // Pop blocked while the next batch still waited on reads
	PopWaitCompute Metric // Pop blocked while the next batch was decoding or assembling
	FlushWait      Metric // time between Flush and its ragged batch reaching Pop

	ZarrMetaHits, ZarrMetaMisses     int64 // array metadata cache
	ShardIndexHits, ShardIndexMisses int64 // shard index cache
	BatchesEmitted                   int64 // batches returned by Pop
	BatchesTruncated                 int64 // ragged batches (shape[0] < BatchSize)
	WavesEmitted                     int64 // waves assembled
	WavesShared                      int64 // CUDA engine: of WavesEmitted, waves that carried chunks of more than one batch
	GPUBytesCommitted                int64 // gauge: device memory reserved at New (the chunk cache included)

	ChunkCacheHits      int64 // chunks a batch found in the chunk cache (no read, copy or decode)
	ChunkCacheMisses    int64 // chunks a batch looked for in the chunk cache and read
	ChunkCacheEvictions int64 // chunks dropped from the chunk cache to make room
	ChunkCacheBytes     int64 // gauge: bytes the chunk cache holds (at most Config.ChunkCacheBytes)

	SamplesEmitted  int64 // samples delivered in batches
	SamplesSkipped  int64 // samples left out of their batches (Config.OnError: OnErrorSkip; Batch.Skipped)
	ChunksDecoded   int64 // distinct chunks decoded
	ChunksGPU       int64 // of which decoded on the GPU (by nvCOMP or the blosclz kernel)
	ChunksRedecoded int64 // chunks the CPU decoded again after the GPU failed on them (a failed status, an LZ4 block the GPU check refused, a damaged blosclz stream) or on a zstd chunk of their wave
	ChunksFill      int64 // chunk regions filled (missing chunks or shards)
	ChunksDeduped   int64 // chunk uses served by a chunk already decoded in the same wave
	ReadOps         int64 // reads issued after coalescing
	BytesRead       int64 // bytes read from storage
	BytesMapped     int64 // of BytesRead, bytes read straight from mapped files (Config.MappedFileBytes): copied by the GPU, or decoded by the host engine
	MappedFileBytes int64 // gauge: bytes of local files mapped (and page-locked, CUDA engine; at most Config.MappedFileBytes)
	RemoteRequests  int64 // object-store requests (GET, HEAD), retries included
	RemoteRetries   int64 // of which retries of a failed attempt
	BoxBytes        int64 // bytes of the boxes in source dtype (read amplification = BytesRead/BoxBytes)
	OutputBytes     int64 // bytes of output tensors delivered
	SlotsInUse      int64 // gauge: batch slots held by the consumer or being filled
	SamplesInFlight int64 // gauge: samples pushed and not yet delivered
}

// ReadAmplification is BytesRead / BoxBytes (0 when nothing was read).
func (s Stats) ReadAmplification() float64 {
	if s.BoxBytes == 0 {
		return 0
	}
	return float64(s.BytesRead) / float64(s.BoxBytes)
}

// statsSink is the pipeline's Stats behind a mutex; stages add to it.
type statsSink struct {
	mu sync.Mutex
	Stats
}

// update runs f on the stats under the lock.
func (s *statsSink) update(f func(*Stats)) {
	s.mu.Lock()
	f(&s.Stats)
	s.mu.Unlock()
}

// Stats returns a snapshot of the pipeline's metrics.
// With several sources, the stages' metrics and counters add up over the
// sources' engines, and so do the memory gauges.
func (p *Pipeline) Stats() Stats {
	p.stats.mu.Lock()
	s := p.stats.Stats
	p.stats.mu.Unlock()
	for _, l := range p.lanes[1:] {
		l.stats.mu.Lock()
		s.addEngine(&l.stats.Stats)
		l.stats.mu.Unlock()
	}
	s.SamplesInFlight = p.inFlight.Load()
	// The first Push may be creating the slot pool (reserve, under p.mu).
	p.mu.Lock()
	for _, l := range p.lanes {
		s.SlotsInUse += l.eng.slotsInUse()
	}
	p.mu.Unlock()
	return s
}

// StatsReset zeroes the stage metrics and counters (not the gauges).
func (p *Pipeline) StatsReset() {
	for _, l := range p.lanes {
		l.stats.mu.Lock()
		s := &l.stats.Stats
		*s = Stats{Engine: s.Engine, Decoder: s.Decoder, GPUBytesCommitted: s.GPUBytesCommitted, ChunkCacheBytes: s.ChunkCacheBytes, MappedFileBytes: s.MappedFileBytes}
		l.stats.mu.Unlock()
	}
}
