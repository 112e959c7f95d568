package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/ptx"
)

// nvcompCallBytes is the most decoded bytes of the one batched call per
// codec that decode-only (nvcomp) times for a source whose wave buffer is
// deviceBuffer bytes (0: the CUDA engine's default): what the CUDA engine
// gives one wave (half of the buffer, so the ceiling decodes batches as
// large as the run's), at most nvcomp.MaxZstdBatchBytes.
func nvcompCallBytes(deviceBuffer int64) int {
	if deviceBuffer == 0 {
		deviceBuffer = pipeline.DefaultCUDADeviceBufferBytes
	}
	return int(min(deviceBuffer/2, nvcomp.MaxZstdBatchBytes))
}

// sourceCallBytes is nvcompCallBytes for each source of the run's
// configuration c (one for a configuration without Sources): a source's
// own DeviceBufferBytes where it sets one, else c's.
func sourceCallBytes(c pipeline.Config) []int {
	if len(c.Sources) == 0 {
		return []int{nvcompCallBytes(c.DeviceBufferBytes)}
	}
	out := make([]int, len(c.Sources))
	for k, s := range c.Sources {
		d := s.DeviceBufferBytes
		if d == 0 {
			d = c.DeviceBufferBytes
		}
		out[k] = nvcompCallBytes(d)
	}
	return out
}

// nvcompInputs are the inputs of one batched nvCOMP call: compressed
// streams and their decoded sizes.
type nvcompInputs struct {
	payloads [][]byte
	sizes    []int
	total    int
}

func (in *nvcompInputs) add(p []byte, n int) {
	in.payloads, in.sizes = append(in.payloads, p), append(in.sizes, n)
	in.total += n
}

// lz4Walks reports whether every LZ4 stream of payload passes
// nvcomp.LZ4GPUCheck, the host twin of the walk the CUDA engine runs on
// the GPU before nvCOMP (a block it refuses the engine decodes on the CPU).
func lz4Walks(payload []byte, streams []plan.Stream) bool {
	for _, s := range streams {
		if nvcomp.LZ4GPUCheck(payload[s.Src:s.Src+s.Len], s.Size) != nil {
			return false
		}
	}
	return true
}

// nvcompSample is what the GPU's decoders take of a decode sample, as the
// CUDA engine sends it (plan.GPUStreams; LZ4 blocks that pass the GPU
// check, which runs before each decode as in the engine; the CPU decodes
// the other chunks). Each source's engine decodes its waves on a stream of
// its own, so decode-only (nvcomp) times one batched call per source and
// decoder (nvCOMP's zstd and LZ4, the blosclz kernel), the sources' calls
// at once: calls[d][k] is decoder d's call for source k, up to the
// source's maxBytes decoded. bytes[d] counts the decoded bytes of every
// chunk of the sample decoder d takes, whether a call holds it or not (a
// chunk larger than a call it does not take).
type nvcompSample struct {
	calls   [plan.Decoders][]nvcompInputs // per decoder, per source
	bytes   [plan.Decoders]int64          // decoded bytes of the sample's chunks each decoder takes
	decoded int64                         // decoded bytes of all the sample's chunks
}

// selectNVCOMP picks the sample's chunks the GPU's decoders take, source
// k's calls holding up to maxBytes[k] decoded bytes each.
func selectNVCOMP(ds *decodeSample, maxBytes []int) (*nvcompSample, error) {
	s := &nvcompSample{decoded: ds.decoded}
	for d := range s.calls {
		s.calls[d] = make([]nvcompInputs, len(maxBytes))
	}
	for i := range ds.refs {
		r := &ds.refs[i]
		rt := r.chunk.Codec.Route()
		if !rt.Simple {
			continue
		}
		if r.source < 0 || r.source >= len(maxBytes) {
			return nil, fmt.Errorf("chunk %s: source %d of %d", r.chunk.Key, r.source, len(maxBytes))
		}
		p, err := r.chunk.Payload(ds.chunk(i))
		if err != nil {
			return nil, err
		}
		n, limit := r.decodedBytes(), maxBytes[r.source]
		streams, dec := plan.GPUStreams(rt.Compression, p, n, nil)
		if streams == nil || dec == plan.LZ4 && !lz4Walks(p, streams) || n > limit {
			continue
		}
		s.bytes[dec] += int64(n)
		in := &s.calls[dec][r.source]
		if in.total+n > limit {
			continue
		}
		for _, st := range streams {
			in.add(p[st.Src:st.Src+st.Len], st.Size)
		}
	}
	return s, nil
}

// taken is the decoded bytes of the sample's chunks the GPU decodes.
func (s *nvcompSample) taken() int64 {
	var n int64
	for _, b := range s.bytes {
		n += b
	}
	return n
}

// share is the part of the sample's decoded bytes that the GPU decodes.
func (s *nvcompSample) share() float64 {
	return float64(s.taken()) / float64(max(s.decoded, 1))
}

// rate is the rate at which the GPU decodes the chunks it takes, given each
// decoder's rate (GB/s of decoded bytes): each decoder's chunks take their
// part of the time in their proportion in the sample (not in the calls'
// proportion, which maxBytes may cut).
func (s *nvcompSample) rate(gbps [plan.Decoders]float64) float64 {
	var secs float64
	for d, bytes := range s.bytes {
		if bytes == 0 {
			continue
		}
		if gbps[d] <= 0 {
			return 0
		}
		secs += float64(bytes) / gbps[d]
	}
	if secs == 0 {
		return 0
	}
	return float64(s.taken()) / secs
}

// nonEmpty returns the calls of ins that hold a chunk.
func nonEmpty(ins []nvcompInputs) []*nvcompInputs {
	var out []*nvcompInputs
	for k := range ins {
		if ins[k].total > 0 {
			out = append(out, &ins[k])
		}
	}
	return out
}

// nvcompDecodeOnly times the GPU's decoders (nvCOMP's batched zstd and
// LZ4, the blosclz kernel) over what the CUDA engine sends them of the
// sample's chunks (selectNVCOMP): for each decoder in turn, one batched
// call per source of up to maxBytes[source] decoded bytes
// (sourceCallBytes), the sources' calls on a stream each and repeated at
// once, with every chunk's status and size checked once. The rate is that
// of the decoders in their proportion in the sample; share is the part of
// the sample's decoded bytes the GPU takes (the CPU decodes the rest), by
// which the caller scales the rate to output bytes.
func nvcompDecodeOnly(device string, ds *decodeSample, maxBytes []int) (c Ceiling, share float64, err error) {
	lib, err := nvcomp.Load()
	if err != nil {
		return Ceiling{}, 0, err
	}
	sel, err := selectNVCOMP(ds, maxBytes)
	if err != nil {
		return Ceiling{}, 0, err
	}
	if sel.taken() == 0 {
		return Ceiling{}, 0, errors.New("no chunk of the sample is one that the GPU decodes")
	}
	ex, err := gpuExecutor(device)
	if err != nil {
		return Ceiling{}, 0, err
	}
	defer ex.Close()
	var parts []string
	var rates [plan.Decoders]float64
	for d := range plan.Decoders {
		calls := nonEmpty(sel.calls[d])
		if len(calls) == 0 {
			continue
		}
		var bytes int64
		var el time.Duration
		err = ex.Do(func() error {
			k, err := ptx.Load()
			if err != nil {
				return err
			}
			defer k.Unload()
			bytes, el, err = nvcompTime(lib, d, calls, k)
			return err
		})
		if err != nil {
			return Ceiling{}, 0, err
		}
		c.Bytes += bytes
		c.Time += el
		rates[d] = float64(bytes) / el.Seconds() / 1e9
		streams := 0
		for _, in := range calls {
			streams += len(in.sizes)
		}
		parts = append(parts, fmt.Sprintf("%s %d streams in %d call(s) at once", decoderName(d), streams, len(calls)))
	}
	return Ceiling{
		Name: "decode-only (nvcomp)", Of: "decoded",
		Detail: fmt.Sprintf("%s, %s, one batched call per source on a stream each, %d rounds", lib.Version, strings.Join(parts, " + "), nvcompCalls),
		Bytes:  c.Bytes, Time: c.Time, GBps: sel.rate(rates), Limits: true,
	}, sel.share(), nil
}

// decoderName names decoder d in the ceiling's detail.
func decoderName(d plan.Decoder) string {
	if alg, ok := algorithm(d); ok {
		return alg.String()
	}
	return "blosclz (kernel)"
}

// algorithm is nvCOMP's algorithm of decoder d (the blosclz kernel has
// none: false).
func algorithm(d plan.Decoder) (nvcomp.Algorithm, bool) {
	switch d {
	case plan.Zstd:
		return nvcomp.Zstd, true
	case plan.LZ4:
		return nvcomp.LZ4, true
	}
	return 0, false
}

// nvcompCalls is how many times nvcompTime repeats its batched calls.
const nvcompCalls = 10

// nvcompRun is one batched call laid out in device memory: its nvCOMP
// decoder (nil for the blosclz kernel), its arrays and where the statuses
// and sizes land.
type nvcompRun struct {
	in              *nvcompInputs
	dec             *nvcomp.Decoder
	batch           *nvcomp.Batch
	dStatus, dSizes cuda.DevicePtr
}

// close closes the run's nvCOMP decoder, if any.
func (r *nvcompRun) close() {
	if r.dec != nil {
		r.dec.Close()
	}
}

// layOut copies the inputs into device memory taken from alloc and makes
// the nvCOMP decoder (for decoder d but blosclz) and the batch of their
// call. It runs on an executor's thread; the caller closes the run.
func layOut(lib *nvcomp.Library, d plan.Decoder, ins *nvcompInputs, alloc func(int) (cuda.DevicePtr, error)) (*nvcompRun, error) {
	payloads, sizes, total := ins.payloads, ins.sizes, ins.total
	maxChunk := 0
	for _, n := range sizes {
		maxChunk = max(maxChunk, n)
	}
	r := &nvcompRun{in: ins}
	var al nvcomp.Alignment
	if alg, ok := algorithm(d); ok {
		var err error
		if r.dec, err = lib.NewDecoder(nvcomp.DecoderConfig{Algorithm: alg, MaxChunks: len(payloads), MaxChunkBytes: maxChunk, MaxTotalBytes: total}); err != nil {
			return nil, err
		}
		al = r.dec.Alignment()
	}
	fail := func(err error) (*nvcompRun, error) {
		r.close()
		return nil, err
	}
	// Host images of the compressed data and of the outputs' layout.
	inOff := make([]int64, len(payloads))
	outOff := make([]int64, len(payloads))
	var inLen, outLen int64
	for i, p := range payloads {
		inOff[i] = alignUp(inLen, int64(max(al.Input, 16)))
		inLen = inOff[i] + int64(len(p))
		outOff[i] = alignUp(outLen, int64(max(al.Output, 16)))
		outLen = outOff[i] + int64(sizes[i])
	}
	in := make([]byte, inLen)
	for i, p := range payloads {
		copy(in[inOff[i]:], p)
	}
	dIn, err := alloc(len(in))
	if err != nil {
		return fail(err)
	}
	dOut, err := alloc(int(outLen))
	if err != nil {
		return fail(err)
	}
	n := len(payloads)
	words := func(f func(i int) uint64) []byte {
		b := make([]byte, 8*n)
		for i := range n {
			binary.NativeEndian.PutUint64(b[8*i:], f(i))
		}
		return b
	}
	arrays := [][]byte{
		words(func(i int) uint64 { return uint64(dIn) + uint64(inOff[i]) }),
		words(func(i int) uint64 { return uint64(len(payloads[i])) }),
		words(func(i int) uint64 { return uint64(dOut) + uint64(outOff[i]) }),
		words(func(i int) uint64 { return uint64(sizes[i]) }),
	}
	var dArr [4]cuda.DevicePtr
	for k, a := range arrays {
		if dArr[k], err = alloc(len(a)); err != nil {
			return fail(err)
		}
		if err := cuda.CopyHtoD(dArr[k], a); err != nil {
			return fail(err)
		}
	}
	if err := cuda.CopyHtoD(dIn, in); err != nil {
		return fail(err)
	}
	if r.dSizes, err = alloc(8 * n); err != nil {
		return fail(err)
	}
	if r.dStatus, err = alloc(4 * n); err != nil {
		return fail(err)
	}
	r.batch = &nvcomp.Batch{
		N: n, CompressedPtrs: dArr[0], CompressedBytes: dArr[1], OutputPtrs: dArr[2], OutputCapacities: dArr[3],
		TotalCapacity: total, OutputSizes: r.dSizes, Statuses: r.dStatus,
	}
	return r, nil
}

// check reports an error unless every chunk of the call decoded to its
// size (the last decode's statuses; all decodes are of the same data).
func (r *nvcompRun) check() error {
	n := r.batch.N
	st := make([]byte, 4*n)
	sz := make([]byte, 8*n)
	if err := cuda.CopyDtoH(st, r.dStatus); err != nil {
		return err
	}
	if err := cuda.CopyDtoH(sz, r.dSizes); err != nil {
		return err
	}
	for i := range n {
		status := nvcomp.Status(int32(binary.NativeEndian.Uint32(st[4*i:])))
		if err := nvcomp.CheckChunk(i, status, binary.NativeEndian.Uint64(sz[8*i:]), r.in.sizes[i]); err != nil {
			return err
		}
	}
	return nil
}

// nvcompTime lays each call's inputs out in device memory, decodes them
// once with decoder d on a stream per call, then times rounds of every
// call at once and checks the statuses: it returns the bytes decoded and
// the time. Each LZ4 decode is preceded by the GPU check the CUDA engine
// runs on LZ4 blocks (k.LZ4Check); blosclz is k's kernel. It runs on an
// executor's thread.
func nvcompTime(lib *nvcomp.Library, d plan.Decoder, calls []*nvcompInputs, k *ptx.Kernels) (bytes int64, el time.Duration, err error) {
	var bufs []*cuda.DevicePtr
	var runs []*nvcompRun
	var streams []cuda.Stream
	defer func() {
		for _, r := range runs {
			r.close()
		}
		for i := range streams {
			streams[i].Destroy()
		}
		for _, p := range bufs {
			p.Free()
		}
	}()
	alloc := func(n int) (cuda.DevicePtr, error) {
		p, err := cuda.MemAlloc(max(n, 1))
		if err == nil {
			bufs = append(bufs, &p)
		}
		return p, err
	}
	for _, in := range calls {
		r, err := layOut(lib, d, in, alloc)
		if err != nil {
			return 0, 0, err
		}
		runs = append(runs, r)
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return 0, 0, err
		}
		streams = append(streams, s)
	}
	var empty cuda.DevicePtr
	if d == plan.LZ4 {
		if empty, err = alloc(256); err != nil {
			return 0, 0, err
		}
		if err := cuda.CopyHtoD(empty, []byte{0}); err != nil {
			return 0, 0, err
		}
	}
	el, err = timeOnStreams(streams, nvcompCalls, func(i int) error {
		s, b := streams[i], runs[i].batch
		switch d {
		case plan.BloscLZ:
			return k.BloscLZ(s, ptx.BloscLZArgs{N: b.N, Ptrs: b.CompressedPtrs, Lens: b.CompressedBytes, Outs: b.OutputPtrs,
				Caps: b.OutputCapacities, Sizes: b.OutputSizes, Statuses: b.Statuses})
		case plan.LZ4:
			if err := k.LZ4Check(s, b.CompressedPtrs, b.CompressedBytes, b.OutputCapacities, b.N, empty); err != nil {
				return err
			}
		}
		return runs[i].dec.Decode(s, b)
	})
	if err != nil {
		return 0, 0, err
	}
	for _, r := range runs {
		if err := r.check(); err != nil {
			return 0, 0, err
		}
		bytes += int64(r.in.total) * nvcompCalls
	}
	return bytes, el, nil
}
