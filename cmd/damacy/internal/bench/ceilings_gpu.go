package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/ptx"
)

// gpuLine names the GPU of device "cuda:N" and the driver's CUDA version.
func gpuLine(device string) (gpu, driver string) {
	n, _ := strconv.Atoi(strings.TrimPrefix(device, "cuda:"))
	if dev, err := cuda.GetDevice(n); err == nil {
		gpu, _ = dev.Name()
	}
	if v, err := cuda.DriverVersion(); err == nil {
		driver = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	return gpu, driver
}

// gpuCeilings measures, on the run's GPU, pinned host-to-device copies at
// the run's average copy size and the assemble kernel over abs (one batch
// per source, of the sources names, timed one after the other).
func gpuCeilings(device string, st pipeline.Stats, sl scale, abs []*assembleBench, names []string) ([]Ceiling, error) {
	ex, err := gpuExecutor(device)
	if err != nil {
		return nil, err
	}
	defer ex.Close()
	var cs []Ceiling
	var errs []error
	if st.H2D.Count > 0 && st.H2D.InBytes > 0 {
		size := int(st.H2D.InBytes / st.H2D.Count)
		var c Ceiling
		err := ex.Do(func() error {
			var err error
			c, err = h2dCeiling(size)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("h2d: %w", err))
		} else {
			sl.apply(&c, sl.copied)
			cs = append(cs, c)
		}
	}
	if abs != nil {
		var each []Ceiling
		err := ex.Do(func() error {
			for _, ab := range abs {
				c, err := assembleOnlyGPU(ab)
				if err != nil {
					return err
				}
				each = append(each, c)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("assemble-only (gpu): %w", err))
		} else {
			cs = append(cs, sl.combine(each, names))
		}
	}
	return cs, errors.Join(errs...)
}

// h2dCeiling times back-to-back pinned copies of size bytes on one stream
// with events. It runs on an executor's thread.
func h2dCeiling(size int) (c Ceiling, err error) {
	size = max(size, 1)
	count := max(10, h2dMinBytes/size)
	host, err := cuda.HostMap(size)
	if err != nil {
		return c, err
	}
	defer host.Free()
	devBuf, err := cuda.MemAlloc(size)
	if err != nil {
		return c, err
	}
	defer devBuf.Free()
	s, err := cuda.NewStream(cuda.StreamNonBlocking)
	if err != nil {
		return c, err
	}
	defer s.Destroy()
	el, err := timeOnStream(s, count, func() error { return s.CopyHtoD(devBuf, host.Bytes()) })
	if err != nil {
		return c, err
	}
	total := int64(size) * int64(count)
	return Ceiling{
		Name: "h2d (pinned)", Of: "copied", Detail: fmt.Sprintf("%d copies of %s", count, base.FormatBytes(int64(size))),
		Bytes: total, Time: el, GBps: float64(total) / el.Seconds() / 1e9, Limits: true,
	}, nil
}

// timeOnStream runs one untimed call of f, then count timed ones between
// two events on s, and returns the GPU time of the timed ones.
func timeOnStream(s cuda.Stream, count int, f func() error) (time.Duration, error) {
	start, err := cuda.NewEvent(cuda.EventDefault)
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := cuda.NewEvent(cuda.EventDefault)
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	if err := f(); err != nil {
		return 0, err
	}
	if err := start.Record(s); err != nil {
		return 0, err
	}
	for range count {
		if err := f(); err != nil {
			return 0, err
		}
	}
	if err := end.Record(s); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	return cuda.EventElapsedTime(start, end)
}

// assembleOnlyGPU times the assemble kernel over ab's batch, with its
// transforms. It runs on an executor's thread.
func assembleOnlyGPU(ab *assembleBench) (c Ceiling, err error) {
	k, err := ptx.Load()
	if err != nil {
		return c, err
	}
	defer k.Unload()
	l := ab.plan.Layout()
	opBytes := ptx.OpBytes(ab.plan.Ops())
	blockOps := ab.plan.BlockOps()
	blockBytes := make([]byte, 4*len(blockOps))
	for i, v := range blockOps {
		binary.NativeEndian.PutUint32(blockBytes[4*i:], v)
	}
	var bufs []*cuda.DevicePtr
	defer func() {
		for _, p := range bufs {
			p.Free()
		}
	}()
	upload := func(b []byte) (cuda.DevicePtr, error) {
		p, err := cuda.MemAlloc(max(len(b), 1))
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, &p)
		if len(b) > 0 {
			err = cuda.CopyHtoD(p, b)
		}
		return p, err
	}
	arena, err := upload(ab.arena)
	if err != nil {
		return c, err
	}
	ops, err := upload(opBytes)
	if err != nil {
		return c, err
	}
	blocks, err := upload(blockBytes)
	if err != nil {
		return c, err
	}
	// The run's transforms (a table only when some sample has one), and
	// the misfit status an integer output whose source may not fit needs.
	var xfs, misfits cuda.DevicePtr
	if t := ab.plan.Transforms(); t != nil {
		if xfs, err = upload(ptx.TransformBytes(t)); err != nil {
			return c, err
		}
	}
	if ab.plan.NeedsCheck() {
		if misfits, err = upload(make([]byte, ptx.MisfitStatusSize)); err != nil {
			return c, err
		}
	}
	out, err := cuda.MemAlloc(int(l.Bytes()))
	if err != nil {
		return c, err
	}
	bufs = append(bufs, &out)
	s, err := cuda.NewStream(cuda.StreamNonBlocking)
	if err != nil {
		return c, err
	}
	defer s.Destroy()
	const count = 20
	el, err := timeOnStream(s, count, func() error {
		return k.Assemble(s, ab.plan, ptx.AssembleArgs{Ops: ops, BlockOps: blocks, Transforms: xfs, Arena: arena, ArenaBytes: int64(len(ab.arena)), Out: out, Misfits: misfits})
	})
	if err != nil {
		return c, err
	}
	total := l.Bytes() * count
	g := float64(total) / el.Seconds() / 1e9
	return Ceiling{
		Name: "assemble-only (gpu)", Of: "output", Detail: fmt.Sprintf("%d samples, %d ops, %d launches", l.Samples, len(ab.plan.Ops()), count),
		Bytes: total, Time: el, GBps: g, OutputGBps: g, PerOutput: 1, Limits: true,
	}, nil
}

// nvcompCallBytes is the most decoded bytes of the one batched call per
// codec that decode-only (nvcomp) times: what the CUDA engine gives one
// wave (half of Config.DeviceBufferBytes, so the ceiling decodes batches
// as large as the run's), at most nvcomp.MaxZstdBatchBytes.
func nvcompCallBytes(deviceBuffer int64) int {
	if deviceBuffer == 0 {
		deviceBuffer = pipeline.DefaultCUDADeviceBufferBytes
	}
	return int(min(deviceBuffer/2, nvcomp.MaxZstdBatchBytes))
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
// engine sends it (plan.NVCOMPStreams; LZ4 blocks that pass the GPU
// check, which runs before each decode as in the engine; the CPU decodes
// the other chunks): the inputs of the one batched call per codec that
// decode-only (nvcomp) times, up to maxBytes decoded each, and the
// decoded bytes of every chunk of the sample nvCOMP takes, per codec,
// whether its call holds it or not (a chunk larger than a call it does
// not take).
type nvcompSample struct {
	zs, lz              nvcompInputs
	zstdBytes, lz4Bytes int64 // decoded bytes of the sample's chunks nvCOMP takes
	decoded             int64 // decoded bytes of all the sample's chunks
}

func selectNVCOMP(ds *decodeSample, maxBytes int) (*nvcompSample, error) {
	s := &nvcompSample{decoded: ds.decoded}
	for i := range ds.refs {
		r := &ds.refs[i]
		rt := r.chunk.Codec.Route()
		if !rt.Simple {
			continue
		}
		p, err := r.chunk.Payload(ds.chunk(i))
		if err != nil {
			return nil, err
		}
		n := r.decodedBytes()
		streams, zstd := plan.NVCOMPStreams(rt.Compression, p, n, nil)
		if streams == nil || !zstd && !lz4Walks(p, streams) || n > maxBytes {
			continue
		}
		in, bytes := &s.lz, &s.lz4Bytes
		if zstd {
			in, bytes = &s.zs, &s.zstdBytes
		}
		*bytes += int64(n)
		if in.total+n > maxBytes {
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

// nvcompDecodeOnly times nvCOMP's batched decoders over what the CUDA
// engine sends it of the sample's chunks (selectNVCOMP): for zstd and for
// LZ4, up to maxBytes of decoded bytes (nvcompCallBytes) in one batched
// call repeated on one stream, with every chunk's status and size checked
// once. The rate is that of both codecs in their proportion in the
// sample; share is the part of the sample's decoded bytes nvCOMP takes
// (the CPU decodes the rest), by which the caller scales the rate to
// output bytes.
func nvcompDecodeOnly(device string, ds *decodeSample, maxBytes int) (c Ceiling, share float64, err error) {
	lib, err := nvcomp.Load()
	if err != nil {
		return Ceiling{}, 0, err
	}
	sel, err := selectNVCOMP(ds, maxBytes)
	if err != nil {
		return Ceiling{}, 0, err
	}
	if sel.zs.total+sel.lz.total == 0 {
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
		alg nvcomp.Algorithm
		in  *nvcompInputs
	}{{nvcomp.Zstd, &sel.zs}, {nvcomp.LZ4, &sel.lz}} {
		if x.in.total == 0 {
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
			bytes, el, err = nvcompTime(lib, x.alg, x.in, k)
			return err
		})
		if err != nil {
			return Ceiling{}, 0, err
		}
		c.Bytes += bytes
		c.Time += el
		rates[i] = float64(bytes) / el.Seconds() / 1e9
		parts = append(parts, fmt.Sprintf("%s %d streams", x.alg, len(x.in.sizes)))
	}
	return Ceiling{
		Name: "decode-only (nvcomp)", Of: "decoded",
		Detail: fmt.Sprintf("%s, %s, one batched call each, %d calls", lib.Version, strings.Join(parts, " + "), nvcompCalls),
		Bytes:  c.Bytes, Time: c.Time, GBps: sel.rate(rates[0], rates[1]), Limits: true,
	}, sel.share(), nil
}

// gpuExecutor starts an executor on device "cuda:N".
func gpuExecutor(device string) (*cuda.Executor, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(device, "cuda:"))
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", device, err)
	}
	dev, err := cuda.GetDevice(n)
	if err != nil {
		return nil, err
	}
	return cuda.NewExecutor(dev)
}

// nvcompCalls is how many times nvcompTime repeats its batched call.
const nvcompCalls = 10

// nvcompTime lays the inputs out in device memory, decodes them once with
// alg and checks the statuses, then times repeated decodes: it returns the
// bytes decoded and the time. With kernels k (LZ4), each decode is preceded
// by the GPU check the CUDA engine runs on LZ4 blocks (ptx.LZ4Check). It
// runs on an executor's thread.
func nvcompTime(lib *nvcomp.Library, alg nvcomp.Algorithm, ins *nvcompInputs, k *ptx.Kernels) (bytes int64, el time.Duration, err error) {
	payloads, sizes, total := ins.payloads, ins.sizes, ins.total
	maxChunk := 0
	for _, n := range sizes {
		maxChunk = max(maxChunk, n)
	}
	dec, err := lib.NewDecoder(nvcomp.DecoderConfig{Algorithm: alg, MaxChunks: len(payloads), MaxChunkBytes: maxChunk, MaxTotalBytes: total})
	if err != nil {
		return 0, 0, err
	}
	defer dec.Close()
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
	var bufs []*cuda.DevicePtr
	defer func() {
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
	dIn, err := alloc(len(in))
	if err != nil {
		return 0, 0, err
	}
	dOut, err := alloc(int(outLen))
	if err != nil {
		return 0, 0, err
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
			return 0, 0, err
		}
		if err := cuda.CopyHtoD(dArr[k], a); err != nil {
			return 0, 0, err
		}
	}
	if err := cuda.CopyHtoD(dIn, in); err != nil {
		return 0, 0, err
	}
	dSizes, err := alloc(8 * n)
	if err != nil {
		return 0, 0, err
	}
	dStatus, err := alloc(4 * n)
	if err != nil {
		return 0, 0, err
	}
	b := &nvcomp.Batch{
		N: n, CompressedPtrs: dArr[0], CompressedBytes: dArr[1], OutputPtrs: dArr[2], OutputCapacities: dArr[3],
		TotalCapacity: total, OutputSizes: dSizes, Statuses: dStatus,
	}
	s, err := cuda.NewStream(cuda.StreamNonBlocking)
	if err != nil {
		return 0, 0, err
	}
	defer s.Destroy()
	var empty cuda.DevicePtr
	if k != nil {
		if empty, err = alloc(256); err != nil {
			return 0, 0, err
		}
		if err := cuda.CopyHtoD(empty, []byte{0}); err != nil {
			return 0, 0, err
		}
	}
	el, err = timeOnStream(s, nvcompCalls, func() error {
		if k != nil {
			if err := k.LZ4Check(s, dArr[0], dArr[1], dArr[3], n, empty); err != nil {
				return err
			}
		}
		return dec.Decode(s, b)
	})
	if err != nil {
		return 0, 0, err
	}
	// Every chunk must have decoded to its size (the last decode's
	// statuses; all decodes are of the same data).
	st := make([]byte, 4*n)
	sz := make([]byte, 8*n)
	if err := cuda.CopyDtoH(st, dStatus); err != nil {
		return 0, 0, err
	}
	if err := cuda.CopyDtoH(sz, dSizes); err != nil {
		return 0, 0, err
	}
	for i := range n {
		status := nvcomp.Status(int32(binary.NativeEndian.Uint32(st[4*i:])))
		if err := nvcomp.CheckChunk(i, status, binary.NativeEndian.Uint64(sz[8*i:]), sizes[i]); err != nil {
			return 0, 0, err
		}
	}
	return int64(total) * nvcompCalls, el, nil
}
