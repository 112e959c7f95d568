package serve

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr/remote"
)

// The serve protocol's wire format (cmd/damacy/python/PROTOCOL.md): frames
// of a 4-byte little-endian length and that many bytes of JSON, file
// descriptors as SCM_RIGHTS on the frame's first byte.

// protocolVersion is the protocol version this server speaks.
const protocolVersion = 2

// maxFrame is the largest frame payload either side may send.
const maxFrame = 16 << 20

// frameError is a malformed frame header: the stream cannot be resynchronised.
type frameError struct{ n uint32 }

func (e *frameError) Error() string {
	return fmt.Sprintf("serve: frame of %d bytes, want 1 to %d", e.n, maxFrame)
}

// readFrame reads one frame's payload. It returns io.EOF when the stream
// ends between frames and io.ErrUnexpectedEOF when it ends inside one.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame {
		return nil, &frameError{n}
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// frameWriter sends frames on the connection, one at a time, each within
// a deadline. The first failed write is sticky: every later write returns
// it, and the reader is woken (its read deadline passes) so that the
// server stops.
type frameWriter struct {
	mu      sync.Mutex // held for a whole frame
	conn    *net.UnixConn
	timeout time.Duration         // each write's deadline
	err     atomic.Pointer[error] // the first failed write's, set under mu

	dmu     sync.Mutex    // guards the deadline of the write in progress
	writing bool          // a frame is being written
	grace   time.Duration // once hurried, the deadline of each write (0: timeout)
}

// write marshals v and sends it as one frame, with fds attached to the
// frame's first byte (one sendmsg; a short write is completed by plain
// writes, the descriptors having gone with the first part).
func (w *frameWriter) write(v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxFrame {
		return fmt.Errorf("serve: a %d-byte message does not fit a frame", len(b))
	}
	frame := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	frame = append(frame, b...)
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.failed(); err != nil {
		return err
	}
	w.dmu.Lock()
	d := w.timeout
	if w.grace > 0 {
		d = w.grace
	}
	w.conn.SetWriteDeadline(time.Now().Add(d))
	w.writing = true
	w.dmu.Unlock()
	n, _, err := w.conn.WriteMsgUnix(frame, oob, nil)
	if err == nil && n < len(frame) {
		_, err = w.conn.Write(frame[n:])
	}
	w.dmu.Lock()
	w.writing = false
	if w.grace > 0 && w.grace < d {
		d = w.grace // hurried meanwhile
	}
	w.dmu.Unlock()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("the client read nothing for %v: %w", d, err)
		}
		err = fmt.Errorf("serve: writing to the client: %w", err)
		w.err.Store(&err)
		w.conn.SetReadDeadline(time.Now())
	}
	return err
}

// hurry bounds the write in progress, and each later one, by d: the
// server is stopping and a client that does not read must not hold it.
func (w *frameWriter) hurry(d time.Duration) {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	if w.grace > 0 && w.grace <= d {
		return
	}
	w.grace = d
	if w.writing {
		w.conn.SetWriteDeadline(time.Now().Add(d))
	}
}

// failed returns the error of the first failed write, if any, without
// waiting for a write in progress.
func (w *frameWriter) failed() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// request is any client message but its "id"; each op reads the members
// it needs.
type request struct {
	Op      string                     `json:"op"`
	Version *int                       `json:"version"`
	Config  map[string]json.RawMessage `json:"config"`
	Device  *deviceSpec                `json:"device"`
	Samples []sampleSpec               `json:"samples"`
	Check   *bool                      `json:"check"` // push: false queues without opening arrays

	Batch       *int64 `json:"batch"`
	Done        bool   `json:"done"`
	EventHandle string `json:"event_handle"` // version 1's release: logged, ignored
	Level       *int   `json:"level"`
	Sampler     *int64 `json:"sampler"` // sampler_draw, sampler_close (sampler.go)
	Epoch       *int64 `json:"epoch"`
	Start       *int64 `json:"start"`
	N           *int   `json:"n"`
}

// deviceSpec is hello's "device": {"kind": "cuda", "uuid": ...} or {"kind": "cpu"}.
type deviceSpec struct {
	Kind string `json:"kind"`
	UUID string `json:"uuid"`
}

// sampleSpec is one sample of a push.
type sampleSpec struct {
	URI   string    `json:"uri"`
	Box   [][]int64 `json:"box"`
	Level int       `json:"level"`
	Seed  uint64    `json:"seed"`
}

// batchMsg is a popped batch (BATCH in the protocol).
type batchMsg struct {
	ID int64 `json:"id"`
	N  int   `json:"n"`
	tensorMsg
	// Tensors describes every tensor of the batch, one per source, the
	// first as the fields above do.
	Tensors []tensorMsg `json:"tensors"`
	// Skipped are the samples config.on_error "skip" left out of the
	// batch, in push order; absent when none was.
	Skipped []sampleErrorMsg `json:"skipped,omitempty"`
}

// sampleErrorMsg is what an error about a sample says of it, besides its
// status and message: its position in push order over the connection
// (counted from 1; absent for a sample a push refused, whose index the
// error gives), its array's URI, its source (with several) and the store
// key of the chunk or shard at fault (relative to the URI).
type sampleErrorMsg struct {
	Status   string `json:"status,omitempty"`
	Message  string `json:"message,omitempty"`
	Position int64  `json:"position,omitempty"`
	URI      string `json:"uri,omitempty"`
	Source   string `json:"source,omitempty"`
	Chunk    string `json:"chunk,omitempty"`
}

// sampleErrorOf describes what err is about: the sample (when it is about
// one), the array, the source, the chunk; nothing for an error not from
// the pipeline.
func sampleErrorOf(err error) sampleErrorMsg {
	var pe *pipeline.Error
	if !errors.As(err, &pe) {
		return sampleErrorMsg{}
	}
	return sampleErrorMsg{Position: pe.Position, URI: remote.Redact(pe.URI), Source: pe.Source, Chunk: pe.Chunk}
}

// tensorMsg is one source's tensor of a batch: its slot (numbered per
// source) and where it lies.
type tensorMsg struct {
	Name   string    `json:"name"`
	Slot   int       `json:"slot"`
	Shape  []int64   `json:"shape"`
	Dtype  string    `json:"dtype"`
	NBytes int64     `json:"nbytes"`
	CUDA   *cudaSlot `json:"cuda,omitempty"`
	Host   *hostSlot `json:"host,omitempty"`
	FDs    int       `json:"fds,omitempty"`
	// Transforms is each sample's transform as this tensor got it (with
	// config.augment), else absent.
	Transforms []transformMsg `json:"transforms,omitempty"`
}

// cudaSlot is a CUDA batch's slot: its memory, the interprocess event
// the batch is ready after, and the slot's done event, which the client
// records after its last use of the batch (release with "done").
type cudaSlot struct {
	MemHandle   string `json:"mem_handle"`
	Offset      int64  `json:"offset"`
	EventHandle string `json:"event_handle"`
	DoneHandle  string `json:"done_handle,omitempty"` // the first tensor's only: the batch's
}

type hostSlot struct {
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
}

// closingMsg is the server's last frame when it stops for a reason other
// than the client's close or end of stream.
type closingMsg struct {
	Op     string `json:"op"` // "closing"
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// errorMsg is a response's "error": with a failed batch's error about
// one sample, that sample's position, URI, source and chunk too.
type errorMsg struct {
	Status   string `json:"status"`
	What     string `json:"what"`
	Message  string `json:"message"`
	Index    *int   `json:"index,omitempty"`
	Position int64  `json:"position,omitempty"`
	URI      string `json:"uri,omitempty"`
	Source   string `json:"source,omitempty"`
	Chunk    string `json:"chunk,omitempty"`
}

// Status names of the protocol's error table.
const (
	statusAgain    = "AGAIN"
	statusInval    = "INVAL"
	statusNotFound = "NOTFOUND"
	statusDtype    = "DTYPE"
	statusRank     = "RANK"
	statusIO       = "IO"
	statusDecode   = "DECODE"
	statusCUDA     = "CUDA"
	statusOOM      = "OOM"
	statusBudget   = "BUDGET"
	statusShutdown = "SHUTDOWN"
)

// statusError is an error the server makes itself, with its status.
type statusError struct {
	status string
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func statusErrorf(status, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

// kindStatus maps the pipeline's error kinds onto status names.
var kindStatus = []struct {
	kind   error
	status string
}{
	{pipeline.ErrInvalid, statusInval},
	{pipeline.ErrNotFound, statusNotFound},
	{pipeline.ErrDtype, statusDtype},
	{pipeline.ErrRank, statusRank},
	{pipeline.ErrStorage, statusIO},
	{pipeline.ErrDecode, statusDecode},
	{pipeline.ErrCUDA, statusCUDA},
	{pipeline.ErrOutOfMemory, statusOOM},
	{pipeline.ErrBudget, statusBudget},
	{pipeline.ErrShutdown, statusShutdown},
	// A Pop cancelled by the server's shutdown: the server cancels pops
	// only when it closes.
	{pipeline.ErrCanceled, statusShutdown},
	{context.Canceled, statusShutdown},
}

// statusOf names err's status: the server's own, or the Kind of the
// outermost *pipeline.Error. Anything else is an IO error.
func statusOf(err error) string {
	var se *statusError
	if errors.As(err, &se) {
		return se.status
	}
	kind := err
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		kind = pe.Kind
	}
	for _, ks := range kindStatus {
		if errors.Is(kind, ks.kind) {
			return ks.status
		}
	}
	return statusIO
}

// metricMsg is one stage metric in the seed's form.
type metricMsg struct {
	MS          float64 `json:"ms"`
	BestMS      float64 `json:"best_ms"` // 1e30 before the first unit of work
	InputBytes  int64   `json:"input_bytes"`
	OutputBytes int64   `json:"output_bytes"`
	Count       int64   `json:"count"`
}

func metricOf(m pipeline.Metric) metricMsg {
	best := 1e30
	if m.Count > 0 {
		best = float64(m.Best) / 1e6
	}
	return metricMsg{MS: float64(m.Time) / 1e6, BestMS: best, InputBytes: m.InBytes, OutputBytes: m.OutBytes, Count: m.Count}
}

// statsMsg is the stats response: the seed's metrics and counters, then
// the Go pipeline's extras.
type statsMsg struct {
	Plan           metricMsg `json:"plan"`
	IO             metricMsg `json:"io"`
	H2D            metricMsg `json:"h2d"`
	Decompress     metricMsg `json:"decompress"`
	Assemble       metricMsg `json:"assemble"`
	PopWaitIO      metricMsg `json:"pop_wait_io"`
	PopWaitCompute metricMsg `json:"pop_wait_compute"`
	FlushWait      metricMsg `json:"flush_wait"`

	ZarrMetaHits      int64 `json:"zarr_meta_hits"`
	ZarrMetaMisses    int64 `json:"zarr_meta_misses"`
	ShardIdxHits      int64 `json:"shard_idx_hits"`
	ShardIdxMisses    int64 `json:"shard_idx_misses"`
	BatchesEmitted    int64 `json:"batches_emitted"`
	BatchesTruncated  int64 `json:"batches_truncated"`
	WavesEmitted      int64 `json:"waves_emitted"`
	WavesShared       int64 `json:"waves_shared"`
	GPUBytesCommitted int64 `json:"gpu_bytes_committed"`

	Engine          string    `json:"engine"`
	Decoder         string    `json:"decoder"`
	Check           metricMsg `json:"check"`
	SamplesEmitted  int64     `json:"samples_emitted"`
	SamplesSkipped  int64     `json:"samples_skipped"`
	ChunksDecoded   int64     `json:"chunks_decoded"`
	ChunksGPU       int64     `json:"chunks_gpu"`
	ChunksRedecoded int64     `json:"chunks_redecoded"`
	ChunksFill      int64     `json:"chunks_fill"`
	ChunksDeduped   int64     `json:"chunks_deduped"`
	ReadOps         int64     `json:"read_ops"`
	BytesRead       int64     `json:"bytes_read"`
	BytesMapped     int64     `json:"bytes_mapped"`
	MappedFileBytes int64     `json:"mapped_file_bytes"`
	BoxBytes        int64     `json:"box_bytes"`
	OutputBytes     int64     `json:"output_bytes"`
	SlotsInUse      int64     `json:"slots_in_use"`
	SamplesInFlight int64     `json:"samples_in_flight"`

	ChunkCacheHits      int64 `json:"chunk_cache_hits"`
	ChunkCacheMisses    int64 `json:"chunk_cache_misses"`
	ChunkCacheEvictions int64 `json:"chunk_cache_evictions"`
	ChunkCacheBytes     int64 `json:"chunk_cache_bytes"`
	RemoteRequests      int64 `json:"remote_requests"`
	RemoteRetries       int64 `json:"remote_retries"`
}

func statsOf(s pipeline.Stats) statsMsg {
	return statsMsg{
		Plan: metricOf(s.Plan), IO: metricOf(s.IO), H2D: metricOf(s.H2D), Decompress: metricOf(s.Decompress),
		Assemble: metricOf(s.Assemble), PopWaitIO: metricOf(s.PopWaitIO), PopWaitCompute: metricOf(s.PopWaitCompute),
		FlushWait: metricOf(s.FlushWait),

		ZarrMetaHits: s.ZarrMetaHits, ZarrMetaMisses: s.ZarrMetaMisses, ShardIdxHits: s.ShardIndexHits,
		ShardIdxMisses: s.ShardIndexMisses, BatchesEmitted: s.BatchesEmitted, BatchesTruncated: s.BatchesTruncated,
		WavesEmitted: s.WavesEmitted, WavesShared: s.WavesShared, GPUBytesCommitted: s.GPUBytesCommitted,

		Engine: s.Engine, Decoder: s.Decoder, Check: metricOf(s.Check), SamplesEmitted: s.SamplesEmitted,
		SamplesSkipped: s.SamplesSkipped,
		ChunksDecoded:  s.ChunksDecoded, ChunksGPU: s.ChunksGPU, ChunksRedecoded: s.ChunksRedecoded,
		ChunksFill: s.ChunksFill, ChunksDeduped: s.ChunksDeduped, ReadOps: s.ReadOps, BytesRead: s.BytesRead,
		BytesMapped: s.BytesMapped, MappedFileBytes: s.MappedFileBytes,
		BoxBytes: s.BoxBytes, OutputBytes: s.OutputBytes, SlotsInUse: s.SlotsInUse, SamplesInFlight: s.SamplesInFlight,

		ChunkCacheHits: s.ChunkCacheHits, ChunkCacheMisses: s.ChunkCacheMisses, ChunkCacheEvictions: s.ChunkCacheEvictions,
		ChunkCacheBytes: s.ChunkCacheBytes, RemoteRequests: s.RemoteRequests, RemoteRetries: s.RemoteRetries,
	}
}
