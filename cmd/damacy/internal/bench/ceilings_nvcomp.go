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

// nvcompSample is what nvCOMP takes of a decode sample, as the CUDA
// engine sends it (plan.GPUStreams, but blosclz streams, which go to the
// project's own kernel; LZ4 blocks that pass the GPU
// check, which runs before each decode as in the engine; the CPU decodes
// the other chunks). Each source's engine decodes its waves on a stream of
// its own, so decode-only (nvcomp) times one batched call per source and
// codec, the sources' calls at once: zs and lz are those calls' inputs,
// per source, up to the source's maxBytes decoded each. zstdBytes and
// lz4Bytes count the decoded bytes of every chunk of the sample nvCOMP
// takes, per codec, whether a call holds it or not (a chunk larger than a
// call it does not take).
type nvcompSample struct {
	zs, lz              []nvcompInputs // per source
	zstdBytes, lz4Bytes int64          // decoded bytes of the sample's chunks nvCOMP takes
	decoded             int64          // decoded bytes of all the sample's chunks
}

// selectNVCOMP picks the sample's chunks nvCOMP takes, source k's calls
// holding up to maxBytes[k] decoded bytes each.
func selectNVCOMP(ds *decodeSample, maxBytes []int) (*nvcompSample, error) {
	s := &nvcompSample{decoded: ds.decoded, zs: make([]nvcompInputs, len(maxBytes)), lz: make([]nvcompInputs, len(maxBytes))}
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
		if streams == nil || dec == plan.BloscLZ || dec == plan.LZ4 && !lz4Walks(p, streams) || n > limit {
			continue
		}
		in, bytes := &s.lz[r.source], &s.lz4Bytes
		if dec == plan.Zstd {
			in, bytes = &s.zs[r.source], &s.zstdBytes
		}
		*bytes += int64(n)
		if in.total+n > limit {
			continue
		}
		for _, st := range streams {
			in.add(p[st.Src:st.Src+st.Len], st.Size)
		}
	}
	return s, nil
}

// share is the part of the sample's decoded bytes that nvCOMP decodes.
func (s *nvcompSample) share() float64 {
	return float64(s.zstdBytes+s.lz4Bytes) / float64(max(s.decoded, 1))
}

// rate is the rate at which nvCOMP decodes the chunks it takes, given each
// codec's rate (GB/s of decoded bytes): each codec's chunks take their
// part of the time in their proportion in the sample (not in the calls'
// proportion, which maxBytes may cut).
func (s *nvcompSample) rate(zstdGBps, lz4GBps float64) float64 {
	var secs float64
	for _, x := range []struct {
		bytes int64
		gbps  float64
	}{{s.zstdBytes, zstdGBps}, {s.lz4Bytes, lz4GBps}} {
		if x.bytes == 0 {
			continue
		}
		if x.gbps <= 0 {
			return 0
		}
		secs += float64(x.bytes) / x.gbps
	}
	if secs == 0 {
		return 0
	}
	return float64(s.zstdBytes+s.lz4Bytes) / secs
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

// nvcompDecodeOnly times nvCOMP's batched decoders over what the CUDA
// engine sends it of the sample's chunks (selectNVCOMP): for zstd, then
// for LZ4, one batched call per source of up to maxBytes[source] decoded
// bytes (sourceCallBytes), the sources' calls on a stream each and
// repeated at once, with every chunk's status and size checked once. The
// rate is that of both codecs in their proportion in the sample; share is
// the part of the sample's decoded bytes nvCOMP takes (the CPU decodes
// the rest), by which the caller scales the rate to output bytes.
func nvcompDecodeOnly(device string, ds *decodeSample, maxBytes []int) (c Ceiling, share float64, err error) {
	lib, err := nvcomp.Load()
	if err != nil {
		return Ceiling{}, 0, err
	}
	sel, err := selectNVCOMP(ds, maxBytes)
	if err != nil {
		return Ceiling{}, 0, err
	}
	zs, lz := nonEmpty(sel.zs), nonEmpty(sel.lz)
	if len(zs)+len(lz) == 0 {
		return Ceiling{}, 0, errors.New("no chunk of the sample is one that nvCOMP decodes")
	}
	ex, err := gpuExecutor(device)
	if err != nil {
		return Ceiling{}, 0, err
	}
	defer ex.Close()
	var parts []string
	var rates [2]float64 // zstd, LZ4
	for i, x := range []struct {
		alg   nvcomp.Algorithm
		calls []*nvcompInputs
	}{{nvcomp.Zstd, zs}, {nvcomp.LZ4, lz}} {
		if len(x.calls) == 0 {
			continue
		}
		var bytes int64
		var el time.Duration
		err = ex.Do(func() error {
			var k *ptx.Kernels
			if x.alg == nvcomp.LZ4 {
				var err error
				if k, err = ptx.Load(); err != nil {
					return err
				}
				defer k.Unload()
			}
			var err error
			bytes, el, err = nvcompTime(lib, x.alg, x.calls, k)
			return err
		})
		if err != nil {
			return Ceiling{}, 0, err
		}
		c.Bytes += bytes
		c.Time += el
		rates[i] = float64(bytes) / el.Seconds() / 1e9
		streams := 0
		for _, in := range x.calls {
			streams += len(in.sizes)
		}
		parts = append(parts, fmt.Sprintf("%s %d streams in %d call(s) at once", x.alg, streams, len(x.calls)))
	}
	return Ceiling{
		Name: "decode-only (nvcomp)", Of: "decoded",
		Detail: fmt.Sprintf("%s, %s, one batched call per source on a stream each, %d rounds", lib.Version, strings.Join(parts, " + "), nvcompCalls),
		Bytes:  c.Bytes, Time: c.Time, GBps: sel.rate(rates[0], rates[1]), Limits: true,
	}, sel.share(), nil
}

// nvcompCalls is how many times nvcompTime repeats its batched calls.
const nvcompCalls = 10

// nvcompRun is one batched call laid out in device memory: its decoder,
// its arrays and where the statuses and sizes land.
type nvcompRun struct {
	in              *nvcompInputs
	dec             *nvcomp.Decoder
	batch           *nvcomp.Batch
	dStatus, dSizes cuda.DevicePtr
}

// layOut copies the inputs into device memory taken from alloc and makes
// the decoder and the batch of their call. It runs on an executor's
// thread; the caller closes the decoder.
func layOut(lib *nvcomp.Library, alg nvcomp.Algorithm, ins *nvcompInputs, alloc func(int) (cuda.DevicePtr, error)) (*nvcompRun, error) {
	payloads, sizes, total := ins.payloads, ins.sizes, ins.total
	maxChunk := 0
	for _, n := range sizes {
		maxChunk = max(maxChunk, n)
	}
	dec, err := lib.NewDecoder(nvcomp.DecoderConfig{Algorithm: alg, MaxChunks: len(payloads), MaxChunkBytes: maxChunk, MaxTotalBytes: total})
	if err != nil {
		return nil, err
	}
	r := &nvcompRun{in: ins, dec: dec}
	fail := func(err error) (*nvcompRun, error) {
		dec.Close()
		return nil, err
	}
	al := dec.Alignment()
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
// once with alg on a stream per call, then times rounds of every call at
// once and checks the statuses: it returns the bytes decoded and the
// time. With kernels k (LZ4), each decode is preceded by the GPU check the
// CUDA engine runs on LZ4 blocks (ptx.LZ4Check). It runs on an executor's
// thread.
func nvcompTime(lib *nvcomp.Library, alg nvcomp.Algorithm, calls []*nvcompInputs, k *ptx.Kernels) (bytes int64, el time.Duration, err error) {
	var bufs []*cuda.DevicePtr
	var runs []*nvcompRun
	var streams []cuda.Stream
	defer func() {
		for _, r := range runs {
			r.dec.Close()
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
		r, err := layOut(lib, alg, in, alloc)
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
	if k != nil {
		if empty, err = alloc(256); err != nil {
			return 0, 0, err
		}
		if err := cuda.CopyHtoD(empty, []byte{0}); err != nil {
			return 0, 0, err
		}
	}
	el, err = timeOnStreams(streams, nvcompCalls, func(i int) error {
		s, b := streams[i], runs[i].batch
		if k != nil {
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
