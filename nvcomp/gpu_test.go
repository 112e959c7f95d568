package nvcomp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/damacy-go/damacy/zarr/zarrtest"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/klauspost/compress/zstd"
)

// gpuProbe reports why there is no usable GPU (nil when there is one).
func gpuProbe() error { return cudatest.HasGPU() }

// gpuEnv returns the nvCOMP library and an executor for device 0, or skips
// the test naming what is missing.
func gpuEnv(t testing.TB) (*Library, *cuda.Executor) {
	t.Helper()
	e := cudatest.Executor(t)
	return mustLoad(t), e
}

// gpuChunk is one chunk of a test batch and what nvCOMP made of it.
type gpuChunk struct {
	name     string
	in       []byte // compressed
	capacity int    // output capacity given to nvCOMP
	shift    int    // bytes added to the input's and output's offsets (alignment tests)

	out     []byte // the capacity bytes of the output buffer after decoding
	size    uint64 // reported decompressed size
	status  Status
	overrun bool // bytes around the output buffer changed
}

// decodeOnGPU runs one batch through dec (see decodeBatch) and fails the
// test on a launch or CUDA error.
func decodeOnGPU(t testing.TB, e *cuda.Executor, dec *Decoder, what string, chunks []*gpuChunk) {
	t.Helper()
	if err := decodeBatch(e, dec.Decode, what, chunks, layout{guard: 4096}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, c := range chunks {
		if c.overrun {
			t.Errorf("%s: %s: nvCOMP wrote outside the output buffer", what, c.name)
		}
	}
}

// layout says how decodeBatch places a batch.
type layout struct {
	guard   int           // bytes after each output buffer that must stay untouched
	pack    int           // alignment of the compressed chunks in the input allocation; 0 means 256
	repeat  int           // Decode calls issued back to back before the stream is synchronised; 0 means 1
	timeout time.Duration // how long the stream may take before the watchdog panics; 0 means a minute
}

// decodeBatch runs one batch through decode (a Decoder's Decode): it lays the chunks out in one
// input allocation (each chunk at an offset aligned to l.pack, plus its
// shift) and one output allocation (each output 256-byte aligned plus its
// shift, followed by l.guard bytes), fills the output allocation with a
// random byte so that stray writes show, decodes on a fresh stream and
// reads everything back. The stream is synchronised under a watchdog: a
// decode that does not finish in time panics with the batch's name
// rather than hang the run.
func decodeBatch(e *cuda.Executor, decode func(cuda.Stream, *Batch) error, what string, chunks []*gpuChunk, l layout) error {
	n := len(chunks)
	pack := l.pack
	if pack == 0 {
		pack = 256
	}
	var inOff, outOff, slot []int
	var inTotal, outTotal, capTotal int
	for _, c := range chunks {
		inOff = append(inOff, inTotal+c.shift)
		slot = append(slot, outTotal)
		outOff = append(outOff, outTotal+c.shift)
		inTotal += (c.shift + len(c.in) + pack - 1) / pack * pack
		outTotal += (c.shift + c.capacity + l.guard + 255) &^ 255
		capTotal += c.capacity
	}
	slot = append(slot, outTotal)
	inHost := make([]byte, inTotal)
	for i, c := range chunks {
		copy(inHost[inOff[i]:], c.in)
	}
	fill := byte(rand.Uint32())
	return e.Do(func() error {
		var in, out, meta cuda.DevicePtr
		defer in.Free()
		defer out.Free()
		defer meta.Free()
		var err error
		if in, err = cuda.MemAlloc(max(inTotal, 1)); err != nil {
			return err
		}
		if out, err = cuda.MemAlloc(max(outTotal, 1)); err != nil {
			return err
		}
		if meta, err = cuda.MemAlloc(n * 8 * 6); err != nil {
			return err
		}
		if err := cuda.CopyHtoD(in, inHost); err != nil {
			return err
		}
		if err := cuda.MemsetD8(out, fill, outTotal); err != nil {
			return err
		}
		m := make([]uint64, 6*n) // in ptrs, in sizes, out ptrs, capacities, sizes, then n int32 statuses
		for i, c := range chunks {
			m[i] = uint64(in) + uint64(inOff[i])
			m[n+i] = uint64(len(c.in))
			m[2*n+i] = uint64(out) + uint64(outOff[i])
			m[3*n+i] = uint64(c.capacity)
			m[4*n+i] = 0xDEADBEEF
			m[5*n+i] = 0x7777777777777777
		}
		if err := cuda.CopyHtoD(meta, u64bytes(m)); err != nil {
			return err
		}
		b := &Batch{
			N:                n,
			CompressedPtrs:   meta,
			CompressedBytes:  meta + cuda.DevicePtr(8*n),
			OutputPtrs:       meta + cuda.DevicePtr(16*n),
			OutputCapacities: meta + cuda.DevicePtr(24*n),
			TotalCapacity:    capTotal,
			OutputSizes:      meta + cuda.DevicePtr(32*n),
			Statuses:         meta + cuda.DevicePtr(40*n),
		}
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		for range max(l.repeat, 1) {
			if err := decode(s, b); err != nil {
				return err
			}
		}
		timeout := l.timeout
		if timeout == 0 {
			timeout = time.Minute
		}
		watchdog := time.AfterFunc(timeout, func() {
			panic(fmt.Sprintf("nvcomp test: %s: decoding %d chunks did not finish in %v", what, n, timeout))
		})
		err = s.Synchronize()
		watchdog.Stop()
		if err != nil {
			return err
		}
		outHost := make([]byte, outTotal)
		if err := cuda.CopyDtoH(outHost, out); err != nil {
			return err
		}
		if err := cuda.CopyDtoH(u64bytes(m), meta); err != nil {
			return err
		}
		for i, c := range chunks {
			c.out = outHost[outOff[i] : outOff[i]+c.capacity]
			c.size = m[4*n+i]
			c.status = statusAt(m, n, i)
			c.overrun = !allBytes(outHost[slot[i]:outOff[i]], fill) || !allBytes(outHost[outOff[i]+c.capacity:slot[i+1]], fill)
		}
		return nil
	})
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

// statusAt returns status i of a batch whose metadata m holds six arrays of
// n words; the last is the int32 statuses, packed.
func statusAt(m []uint64, n, i int) Status {
	return Status(int32(binary.LittleEndian.Uint32(u64bytes(m)[8*5*n+4*i:])))
}

func u64bytes(m []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m))), 8*len(m))
}

// newDecoder makes a decoder on the executor and closes it when the test
// ends.
func newDecoder(t testing.TB, lib *Library, e *cuda.Executor, cfg DecoderConfig) *Decoder {
	t.Helper()
	var dec *Decoder
	if err := e.Do(func() (err error) { dec, err = lib.NewDecoder(cfg); return err }); err != nil {
		t.Fatalf("NewDecoder(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := e.Do(dec.Close); err != nil {
			t.Errorf("Decoder.Close: %v", err)
		}
	})
	return dec
}

// checkDecoded requires that every chunk decoded, with success and the
// right size, to its expected bytes.
func checkDecoded(t testing.TB, chunks []*gpuChunk, want [][]byte) {
	t.Helper()
	for i, c := range chunks {
		if err := CheckChunk(i, c.status, c.size, len(want[i])); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !bytes.Equal(c.out[:len(want[i])], want[i]) {
			t.Errorf("%s: output differs from the source at byte %d of %d", c.name, firstDiff(c.out, want[i]), len(want[i]))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testSources returns chunks of fresh data of the given size: uniformly
// random, smooth uint16 with 4 bits of noise, and the latter byte-shuffled.
func testSources(r *rand.Rand, size int) map[string][]byte {
	s := smoothU16(r, size+1, 256, 4)[:size]
	return map[string][]byte{
		"random":   randomBytes(r, size),
		"smooth":   s,
		"shuffled": shuffle2(s),
	}
}

// TestGPUDecodeZstd decodes klauspost frames of every level, with and
// without checksums, of three sizes and three kinds of data, in one batch
// per size, and compares nvCOMP's output with the source byte for byte.
func TestGPUDecodeZstd(t *testing.T) {
	lib, e := gpuEnv(t)
	r := newRand(t)
	for _, size := range []int{64 << 10, 256<<10 + 6, 1 << 20} {
		var chunks []*gpuChunk
		var want [][]byte
		for kind, src := range testSources(r, size) {
			for _, level := range zstdLevels {
				for _, sum := range []bool{false, true} {
					frame := zstdEncode(t, src, level, sum)
					// Checksummed frames go to the CPU, but nvCOMP decodes
					// the valid ones.
					if r := ZstdGPUReason(frame, size); r != ZstdGPU && !(sum && r == ZstdChecksum) {
						t.Fatalf("klauspost frame %s/%v: %v", kind, level, r)
					}
					chunks = append(chunks, &gpuChunk{name: fmt.Sprintf("%s/%d/%v/checksum=%v", kind, size, level, sum), in: frame, capacity: size})
					want = append(want, src)
				}
			}
		}
		dec := newDecoder(t, lib, e, DecoderConfig{Algorithm: Zstd, MaxChunks: len(chunks), MaxChunkBytes: size})
		decodeOnGPU(t, e, dec, fmt.Sprintf("zstd %d", size), chunks)
		checkDecoded(t, chunks, want)
	}
}

// TestGPUDecodeLZ4 decodes fast and HC LZ4 blocks of three sizes and three
// kinds of data. When nvCOMP allows byte alignment, half the chunks sit at
// odd offsets in the input and output allocations.
func TestGPUDecodeLZ4(t *testing.T) {
	lib, e := gpuEnv(t)
	r := newRand(t)
	align, err := lib.Alignment(LZ4)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{64 << 10, 256<<10 + 6, 1 << 20} {
		var chunks []*gpuChunk
		var want [][]byte
		for kind, src := range testSources(r, size) {
			for _, hc := range []bool{false, true} {
				for shift := range 2 {
					if shift > 0 && (align.Input > 1 || align.Output > 1) {
						continue
					}
					shift += 2 * r.IntN(4) * shift // 0, or 1, 3, 5 or 7
					chunks = append(chunks, &gpuChunk{name: fmt.Sprintf("%s/%d/hc=%v/shift=%d", kind, size, hc, shift),
						in: lz4Encode(t, src, hc), capacity: size, shift: shift})
					want = append(want, src)
				}
			}
		}
		dec := newDecoder(t, lib, e, DecoderConfig{Algorithm: LZ4, MaxChunks: len(chunks), MaxChunkBytes: size})
		decodeOnGPU(t, e, dec, fmt.Sprintf("lz4 %d", size), chunks)
		checkDecoded(t, chunks, want)
	}
}

// TestDecodeAllocs checks that Decode allocates no Go memory on amd64 (the
// SyscallN path), and measures its host cost.
func TestDecodeAllocs(t *testing.T) {
	lib, e := gpuEnv(t)
	r := newRand(t)
	const n, size = 64, 64 << 10
	dec := newDecoder(t, lib, e, DecoderConfig{Algorithm: LZ4, MaxChunks: n, MaxChunkBytes: size})
	src := smoothU16(r, size, 256, 4)
	block := lz4Encode(t, src, false)
	err := e.Do(func() error {
		in, err := cuda.MemAlloc(len(block))
		if err != nil {
			return err
		}
		defer in.Free()
		out, err := cuda.MemAlloc(n * size)
		if err != nil {
			return err
		}
		defer out.Free()
		meta, err := cuda.MemAlloc(6 * 8 * n)
		if err != nil {
			return err
		}
		defer meta.Free()
		m := make([]uint64, 6*n)
		for i := range n {
			m[i], m[n+i], m[2*n+i], m[3*n+i] = uint64(in), uint64(len(block)), uint64(out)+uint64(i*size), size
		}
		if err := cuda.CopyHtoD(in, block); err != nil {
			return err
		}
		if err := cuda.CopyHtoD(meta, u64bytes(m)); err != nil {
			return err
		}
		b := &Batch{N: n, CompressedPtrs: meta, CompressedBytes: meta + 8*n, OutputPtrs: meta + 16*n,
			OutputCapacities: meta + 24*n, TotalCapacity: n * size, OutputSizes: meta + 32*n, Statuses: meta + 40*n}
		s, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		var callErr error
		allocs := testing.AllocsPerRun(100, func() {
			if err := dec.Decode(s, b); err != nil {
				callErr = err
			}
		})
		if callErr != nil {
			return callErr
		}
		start := time.Now()
		const calls = 1000
		for range calls {
			if err := dec.Decode(s, b); err != nil {
				return err
			}
		}
		enqueue := time.Since(start) / calls
		if err := s.Synchronize(); err != nil {
			return err
		}
		t.Logf("Decode of %d LZ4 chunks: %.1f allocations, %v of host time per call (enqueue only)", n, allocs, enqueue)
		if syscallPassesOpts && allocs != 0 {
			t.Errorf("Decode allocates %.1f times per call; want 0", allocs)
		}
		if err := cuda.CopyDtoH(u64bytes(m), meta); err != nil {
			return err
		}
		for i := range n {
			if err := CheckChunk(i, statusAt(m, n, i), m[4*n+i], size); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDecoderRejects checks Decode's host-side validation and the
// decoder's limits; no work reaches the GPU.
func TestDecoderRejects(t *testing.T) {
	lib, e := gpuEnv(t)
	dec := newDecoder(t, lib, e, DecoderConfig{Algorithm: Zstd, MaxChunks: 8, MaxChunkBytes: 1 << 16})
	if got := dec.Config().MaxTotalBytes; got != 8<<16 {
		t.Errorf("MaxTotalBytes = %d; want %d", got, 8<<16)
	}
	t.Logf("zstd decoder for 8 × 64 KiB: temp %d bytes, alignment %+v", dec.TempBytes(), dec.Alignment())
	ok := Batch{N: 8, CompressedPtrs: 0x1000, CompressedBytes: 0x2000, OutputPtrs: 0x3000, OutputCapacities: 0x4000,
		TotalCapacity: 8 << 16, OutputSizes: 0x5000, Statuses: 0x6000}
	tests := []struct {
		what string
		edit func(*Batch)
	}{
		{"no chunks", func(b *Batch) { b.N = 0 }},
		{"too many chunks", func(b *Batch) { b.N = 9 }},
		{"total over the maximum", func(b *Batch) { b.TotalCapacity = 8<<16 + 1 }},
		{"negative total", func(b *Batch) { b.TotalCapacity = -1 }},
		{"null statuses", func(b *Batch) { b.Statuses = 0 }},
		{"misaligned sizes", func(b *Batch) { b.OutputSizes = 0x5004 }},
		{"misaligned statuses", func(b *Batch) { b.Statuses = 0x6002 }},
	}
	for _, tt := range tests {
		b := ok
		tt.edit(&b)
		if err := dec.check(&b); err == nil {
			t.Errorf("%s: Decode accepted %+v", tt.what, b)
		}
	}
	if err := dec.check(&ok); err != nil {
		t.Errorf("check(%+v) = %v", ok, err)
	}
	for _, cfg := range []DecoderConfig{
		{Algorithm: Zstd, MaxChunks: 0, MaxChunkBytes: 1},
		{Algorithm: Zstd, MaxChunks: 1, MaxChunkBytes: 1 << 31},
		{Algorithm: Algorithm(7), MaxChunks: 1, MaxChunkBytes: 1},
		{Algorithm: LZ4, MaxChunks: 4, MaxChunkBytes: 100, MaxTotalBytes: 401},
		{Algorithm: Zstd, MaxChunks: 4096, MaxChunkBytes: 256 << 10},
	} {
		err := e.Do(func() error {
			d, err := lib.NewDecoder(cfg)
			if err == nil {
				d.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("NewDecoder(%+v) succeeded", cfg)
		}
	}
	var nilLib *Library
	if _, err := nilLib.NewDecoder(DecoderConfig{Algorithm: Zstd, MaxChunks: 1, MaxChunkBytes: 1}); err == nil {
		t.Error("NewDecoder on a nil library succeeded")
	}
	d := newDecoder(t, lib, e, DecoderConfig{Algorithm: LZ4, MaxChunks: 1, MaxChunkBytes: 1})
	if err := e.Do(d.Close); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(0, &ok); err == nil {
		t.Error("Decode after Close succeeded")
	}
}

// frameFeature is one experiment of TestZstdFrameFeatures, or one damaged
// chunk of TestGPUCorruptInput.
type frameFeature struct {
	name     string
	chunk    []byte
	capacity int
	want     []byte // the correct decoding into capacity bytes, nil if there is none
}

// zstdFeatureCases builds the chunks whose handling by nvCOMP the package
// documentation reports, each with its correct decoding (from the source
// data, not from a decoder).
func zstdFeatureCases(t testing.TB, r *rand.Rand) []frameFeature {
	size := 200<<10 + 2*r.IntN(1000)
	a := smoothU16(r, size, 512, 4)
	b := smoothU16(r, size/2, 512, 3)
	ab := append(append([]byte{}, a...), b...)
	fa, fb := zstdEncode(t, a, zstd.SpeedDefault, false), zstdEncode(t, b, zstd.SpeedDefault, false)
	na, nb := zstdEncodeNoSize(t, a, zstd.SpeedDefault, false), zstdEncodeNoSize(t, b, zstd.SpeedDefault, false)
	ca := zstdEncode(t, a, zstd.SpeedDefault, true)
	badSum := append([]byte{}, ca...)
	badSum[len(badSum)-1-r.IntN(4)] ^= 1 << r.IntN(8)
	// Random data at the fastest level is stored in raw blocks: a flipped
	// payload byte still parses, and only the checksum can tell.
	raw := randomBytes(r, size)
	craw := zstdEncode(t, raw, zstd.SpeedFastest, true)
	badData := append([]byte{}, craw...)
	badData[len(badData)/2] ^= 0x40
	if f, reason := scanZstdFrame(badData); reason != ZstdGPU || !f.checksum {
		t.Fatalf("corrupted raw-block frame scans as %+v, %v", f, reason)
	}
	skip := skippableFrame(r, 100)
	return []frameFeature{
		{"one frame", fa, size, a},
		{"no content size, capacity = size", na, size, a},
		{"no content size, capacity = size + 4 KiB", na, size + 4096, a},
		{"no content size, capacity = size - 1", na, size - 1, nil},
		{"content size, capacity = size + 4 KiB", fa, size + 4096, a},
		{"content size, capacity = size - 1", fa, size - 1, nil},
		{"two frames with content sizes", cat(fa, fb), len(ab), ab},
		{"two frames without content sizes", cat(na, nb), len(ab), ab},
		{"checksum, good", ca, size, a},
		{"checksum, corrupted checksum", badSum, size, nil},
		{"checksum, corrupted raw block", badData, size, nil},
		{"leading skippable frame", cat(skip, fa), size, a},
		{"trailing skippable frame", cat(fa, skip), size, a},
		{"content size with an 8 MiB window", withWindow(t, fa, 23), size, a},
		{"content size with a 128 MiB window", withWindow(t, fa, 27), size, a},
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// withWindow rewrites a single-segment frame with a content size into a
// windowed frame that keeps the content size and declares a window of
// 2^log bytes.
func withWindow(t testing.TB, frame []byte, log int) []byte {
	t.Helper()
	fhd := frame[4]
	if fhd>>5&1 != 1 || fhd>>6 == 0 {
		t.Fatalf("frame header %#x is not single-segment with a content size", fhd)
	}
	out := binary.LittleEndian.AppendUint32(nil, zstdMagic)
	out = append(out, fhd&^(1<<5), byte((log-10)<<3))
	return append(out, frame[5:]...)
}

// TestZstdFrameFeatures runs nvCOMP on zstd chunks outside the plain case
// (frames without content size, several frames, checksums, skippable
// frames, wide windows), each alone in a child process, and logs what it
// does next to what the CPU decoder does. It requires what ZstdGPUReason
// relies on: every chunk that the scanner sends to the GPU decodes
// correctly there, without writing outside its output.
func TestZstdFrameFeatures(t *testing.T) {
	lib, _ := gpuEnv(t)
	r := newRand(t)
	cases := zstdFeatureCases(t, r)
	job := childJob{Alg: Zstd, Guard: 2 << 20}
	for _, c := range cases {
		job.Names = append(job.Names, c.name)
		job.Chunks = append(job.Chunks, c.chunk)
		job.Want = append(job.Want, c.want)
		job.Capacity = append(job.Capacity, c.capacity)
	}
	outs := isolateEach(t, job)
	for i, c := range cases {
		o := outs[i]
		cpu := "error"
		if c.want != nil {
			cpu = fmt.Sprintf("%d bytes", len(c.want))
		}
		// What a zarr reader, whose expected size is the capacity, would
		// accept after checking status and size.
		accepted := o.fault == "" && CheckChunk(i, o.status, o.size, c.capacity) == nil
		reason := ZstdGPUReason(c.chunk, c.capacity)
		t.Logf("nvCOMP %s: %-42s | gpu: %-60v accepted=%-5v | cpu: %-12s | route: %v",
			lib.Version, c.name, o, accepted, cpu, reason)
		if reason == ZstdGPU && (!o.correct || o.overrun || o.fault != "") {
			t.Errorf("%s: routed to the GPU, but nvCOMP gives %v", c.name, o)
		}
	}
}

// TestZstdLargeBatch decodes batches of valid chunks (byte-shuffled
// smooth data, the kind on which large batches faulted) in child processes,
// packed at 16 bytes and decoded twice back to back: batches up to
// MaxZstdBatchBytes must decode correctly, and the log shows what happens
// beyond it.
func TestZstdLargeBatch(t *testing.T) {
	lib, _ := gpuEnv(t)
	r := newRand(t)
	for _, g := range []struct {
		alg      Algorithm
		n, chunk int
	}{
		{Zstd, 4096, 64 << 10}, {Zstd, 4096, 96 << 10}, {Zstd, 4096, 128 << 10}, {Zstd, 2048, 256 << 10},
		{Zstd, 512, 1 << 20}, {Zstd, 4096, 256 << 10}, {LZ4, 4096, 1 << 20},
	} {
		job := childJob{Alg: g.alg, N: g.n, Guard: 256, Pack: 16, Repeat: 2, NoLimit: true, Timeout: 20 * time.Second}
		for k := range 64 {
			src := shuffle2(smoothU16(r, g.chunk, 256, 4))
			var c []byte
			if g.alg == Zstd {
				c = zstdEncode(t, src, zstd.SpeedDefault, false)
			} else {
				c = lz4Encode(t, src, false)
			}
			job.Names = append(job.Names, fmt.Sprint(k))
			job.Chunks = append(job.Chunks, c)
			job.Want = append(job.Want, src)
			job.Capacity = append(job.Capacity, g.chunk)
		}
		temp, err := lib.TempSize(g.alg, g.n, g.chunk, g.n*g.chunk)
		if err != nil {
			t.Fatal(err)
		}
		res := runChild(t, job)
		bad := 0
		for i := range res.Correct {
			if !res.Correct[i] || res.Overrun[i] {
				bad++
			}
		}
		total := g.n * g.chunk
		t.Logf("nvCOMP %s %v: %5d × %4d KiB = %5d MiB, temp %6d MiB: error %q, %d of %d chunks wrong",
			lib.Version, g.alg, g.n, g.chunk>>10, total>>20, temp>>20, res.Err, bad, len(res.Correct))
		if (g.alg == LZ4 || total <= MaxZstdBatchBytes) && (res.Err != "" || bad > 0) {
			t.Errorf("%v: %d × %d bytes, within the limits, failed", g.alg, g.n, g.chunk)
		}
	}
}

// corrupt returns damaged variants of a valid chunk: truncations, bit
// flips anywhere and in the first bytes, and, through the capacity, wrong
// output sizes.
func corrupt(r *rand.Rand, name string, chunk []byte, size int) []frameFeature {
	var out []frameFeature
	for range 4 {
		n := r.IntN(len(chunk))
		out = append(out, frameFeature{name: fmt.Sprintf("%s truncated to %d", name, n), chunk: chunk[:n], capacity: size})
	}
	for range 40 {
		c := append([]byte{}, chunk...)
		flips := 1 + r.IntN(8)
		for range flips {
			c[r.IntN(len(c))] ^= 1 << r.IntN(8)
		}
		out = append(out, frameFeature{name: fmt.Sprintf("%s with %d bit flips", name, flips), chunk: c, capacity: size})
	}
	for range 8 {
		c := append([]byte{}, chunk...)
		c[r.IntN(min(len(c), 24))] ^= 1 << r.IntN(8)
		out = append(out, frameFeature{name: name + " with a flip in its first 24 bytes", chunk: c, capacity: size})
	}
	for _, capacity := range []int{size - 1, size / 2, size + 1} {
		out = append(out, frameFeature{name: fmt.Sprintf("%s into %d bytes", name, capacity), chunk: chunk, capacity: capacity})
	}
	return out
}

// gpuRoute is the package's routing rule for a chunk: ZstdGPUReason for
// zstd, LZ4GPUCheck for LZ4.
func gpuRoute(alg Algorithm, chunk []byte, want int) bool {
	if alg == Zstd {
		return ZstdGPUCompatible(chunk, want)
	}
	return LZ4GPUCheck(chunk, want) == nil
}

// TestGPUCorruptInput damages zstd and LZ4 chunks (truncations, bit flips,
// wrong sizes), routes them as the package says (ZstdGPUReason,
// LZ4GPUCheck), and decodes the ones routed to the GPU in child processes
// (see isolate), comparing with the CPU decoders.
//
// For LZ4 it requires the package's guarantee: no routed chunk makes
// nvCOMP hang, fault or write outside its output, and every chunk nvCOMP
// decodes to the expected size holds exactly what the CPU decoder makes of
// it. For zstd the header scan cannot see damage inside compressed blocks,
// and nvCOMP 6.0 was seen to hang on such a chunk (1 of 48) and to report
// success with wrong data where the CPU decoder reports corruption (2 of
// 48); the test logs those as nvCOMP's limits and requires the rest: no
// fault, no write outside the output, and identical bytes whenever both
// decode.
func TestGPUCorruptInput(t *testing.T) {
	lib, _ := gpuEnv(t)
	r := newRand(t)
	for _, alg := range []Algorithm{Zstd, LZ4} {
		var cases []frameFeature
		size := 128 << 10
		for kind, src := range testSources(r, size) {
			var chunk []byte
			if alg == Zstd {
				chunk = zstdEncode(t, src, zstdLevels[r.IntN(len(zstdLevels))], false)
			} else {
				chunk = lz4Encode(t, src, r.IntN(2) == 1)
			}
			cases = append(cases, corrupt(r, fmt.Sprintf("%s/%v", kind, alg), chunk, size)...)
		}
		job := childJob{Alg: alg, Guard: 256 << 10, Timeout: 5 * time.Second}
		var routed []frameFeature
		for _, c := range cases {
			if !gpuRoute(alg, c.chunk, c.capacity) {
				continue
			}
			var cpu []byte
			var err error
			if alg == Zstd {
				cpu, err = cpuZstd(c.chunk, c.capacity)
			} else {
				cpu, err = cpuLZ4(c.chunk, c.capacity)
			}
			if err != nil || len(cpu) != c.capacity {
				cpu = nil
			}
			c.want = cpu
			routed = append(routed, c)
			job.Names = append(job.Names, c.name)
			job.Chunks = append(job.Chunks, c.chunk)
			job.Want = append(job.Want, cpu)
			job.Capacity = append(job.Capacity, c.capacity)
		}
		if len(routed) == 0 {
			t.Fatalf("%v: no damaged chunk was routed to the GPU; the test checks nothing", alg)
		}
		outs := isolateGroups(t, job, 16, time.Now().Add(70*time.Second))
		var bothOK, bothFail, gpuOnlyFails, notRun, hangs, silent, overruns int
		for i, c := range routed {
			o := outs[i]
			if o.notRun {
				notRun++
				continue
			}
			gpuOK := o.fault == "" && !o.overrun && CheckChunk(i, o.status, o.size, c.capacity) == nil
			switch {
			case alg == Zstd && strings.HasPrefix(o.fault, hangPrefix):
				hangs++
				t.Logf("%s: nvCOMP limit: %v", c.name, o)
			case alg == Zstd && o.fault == "" && o.overrun && o.size != uint64(c.capacity):
				// Damaged blocks decode past the frame's content size; the
				// reported size gives it away, which is what the pipeline
				// checks (the wave fails), and its wave buffers end in a
				// guard region that such writes land in.
				overruns++
				t.Logf("%s: nvCOMP limit: writes past its output, reporting %d bytes", c.name, o.size)
			case o.fault != "" || o.overrun:
				t.Errorf("%s: routed to the GPU, and nvCOMP gives %v", c.name, o)
			case gpuOK && c.want == nil && alg == Zstd:
				silent++
				t.Logf("%s: nvCOMP limit: success with %d bytes; the CPU decoder reports corruption", c.name, o.size)
			case gpuOK && c.want != nil:
				bothOK++
				if !o.correct {
					t.Errorf("%s: nvCOMP and the CPU both decode %d bytes, but differently", c.name, c.capacity)
				}
			case gpuOK:
				t.Errorf("%s: nvCOMP reports success with %d bytes; the CPU decoder rejects it", c.name, o.size)
			case c.want != nil:
				gpuOnlyFails++
				t.Logf("%s: nvCOMP gives %v; the CPU decodes it", c.name, o)
			default:
				bothFail++
			}
		}
		t.Logf("nvCOMP %s %v: %d damaged chunks, %d kept on the CPU by the routing rule; of the %d routed to the GPU: both decode (identically) %d, both fail %d, only nvCOMP fails %d, nvCOMP hangs %d, nvCOMP succeeds where the CPU reports corruption %d, nvCOMP overruns with a wrong size %d, not run in the time budget %d",
			lib.Version, alg, len(cases), len(cases)-len(routed), len(routed), bothOK, bothFail, gpuOnlyFails, hangs, silent, overruns, notRun)
	}
}

// mustPython returns the interpreter, or skips the test saying why there is
// none (fails it when DAMACY_REQUIRE_PYTHON=1).
func mustPython(t testing.TB) string {
	t.Helper()
	return zarrtest.MustHavePython(t, "numpy", "tensorstore")
}

// TestTensorstoreChunks decodes the inner chunks of sharded zstd arrays
// that tensorstore wrote (testdata/tensorstore_zstd.py, fresh random data):
// on the CPU always, and with nvCOMP where there is a GPU, all of them,
// whatever ZstdGPUReason says; the chunks routed to the GPU must decode
// correctly there. It logs how the chunks' frames look and route.
func TestTensorstoreChunks(t *testing.T) {
	py := mustPython(t)
	dir := t.TempDir()
	seed := strconv.FormatUint(zarrtest.Seed(t)%1_000_000_007, 10)
	if out, err := exec.Command(py, filepath.Join("testdata", "tensorstore_zstd.py"), dir, seed).CombinedOutput(); err != nil {
		t.Fatalf("tensorstore_zstd.py: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Chunks []struct{ Array, Zst, Raw string }
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Chunks) == 0 {
		t.Fatal("tensorstore_zstd.py wrote no chunks")
	}
	var chunks []*gpuChunk
	var want [][]byte
	reasons := map[string]int{}
	maxCap := 0
	for _, c := range manifest.Chunks {
		zst, err1 := os.ReadFile(filepath.Join(dir, "chunks", c.Zst))
		exp, err2 := os.ReadFile(filepath.Join(dir, "chunks", c.Raw))
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		f, _ := scanZstdFrame(zst)
		reasons[fmt.Sprintf("%s: content size %v, checksum %v: %v", c.Array, f.contentSize >= 0, f.checksum, ZstdGPUReason(zst, len(exp)))]++
		if got, err := cpuZstd(zst, len(exp)); err != nil || !bytes.Equal(got, exp) {
			t.Errorf("%s: klauspost decodes %d bytes, %v; want tensorstore's %d bytes", c.Zst, len(got), err, len(exp))
		}
		chunks = append(chunks, &gpuChunk{name: c.Zst, in: zst, capacity: len(exp)})
		want = append(want, exp)
		maxCap = max(maxCap, len(exp))
	}
	for k, n := range reasons {
		t.Logf("%d chunks of %s", n, k)
	}
	if gpuProbe() != nil {
		return // the GPU half needs a GPU
	}
	lib, e := gpuEnv(t)
	dec := newDecoder(t, lib, e, DecoderConfig{Algorithm: Zstd, MaxChunks: len(chunks), MaxChunkBytes: maxCap})
	decodeOnGPU(t, e, dec, "tensorstore chunks", chunks)
	var correct int
	for i, c := range chunks {
		ok := CheckChunk(i, c.status, c.size, len(want[i])) == nil && bytes.Equal(c.out, want[i])
		if ok {
			correct++
		} else if ZstdGPUReason(c.in, len(want[i])) == ZstdGPU {
			t.Errorf("%s: routed to the GPU, but nvCOMP gives %v, %d bytes", c.name, c.status, c.size)
		}
	}
	t.Logf("nvCOMP %s decodes %d of %d tensorstore chunks correctly", lib.Version, correct, len(chunks))
}
