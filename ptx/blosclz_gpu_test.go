package ptx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// A bloscLZCase is one stream for the blosclz kernel: its bytes, the size
// it must decode to, and what the host's blosc decoder makes of it (nil:
// it fails).
type bloscLZCase struct {
	src  []byte
	size int
	want []byte
}

// hostBloscLZ decodes one stream with the host's blosc decoder: the bytes,
// or nil when it fails.
func hostBloscLZ(stream []byte, size int) []byte {
	out := make([]byte, size)
	if n, err := blosc.DecodeNoUnshuffle(out, zarrtest.BloscLZStream(stream, size)); err != nil || n != size {
		return nil
	}
	return out
}

// bloscLZData returns n bytes of one of several kinds: smooth (the zarr
// benchmark's values as uint16), steps with noise in the low bits, runs,
// random, or short repeats.
func bloscLZData(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	switch r.IntN(5) {
	case 0:
		for i := 0; i+1 < n; i += 2 {
			x, y, z := uint64(i/2%64), uint64(i/2/64%64), uint64(i/2/4096)
			binary.LittleEndian.PutUint16(b[i:], uint16(x+y*y/32+z*z*z))
		}
	case 1:
		noise := r.IntN(9)
		for i := range b {
			b[i] = byte(i/(1+r.IntN(64))) ^ byte(r.IntN(1<<noise))
		}
	case 2:
		for i := 0; i < n; {
			run := 1 + r.IntN(300)
			v := byte(r.IntN(4))
			for ; run > 0 && i < n; run-- {
				b[i] = v
				i++
			}
		}
	case 3:
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	default:
		period := 1 + r.IntN(40)
		for i := range b {
			b[i] = byte(i % period * 7)
		}
	}
	return b
}

// bloscLZCases returns the streams of blosc chunks written by this
// package's encoder (every shuffle, several typesizes and block sizes, raw
// streams among them) and by c-blosc (the numcodecs fixtures of
// zarr/blosc), then damaged copies: bit flips, overwritten bytes,
// truncations, a size off by one, random bytes, and hand-made tokens
// (long lengths, far distances, distances before the start).
func bloscLZCases(t *testing.T, r *rand.Rand) []bloscLZCase {
	t.Helper()
	var chunks [][]byte
	for range 150 {
		o := blosc.Options{Compressor: blosc.BloscLZ, Level: 1 + r.IntN(9), Shuffle: blosc.Shuffle(r.IntN(3)),
			Typesize: []int{1, 2, 4, 8}[r.IntN(4)]}
		if r.IntN(3) == 0 {
			o.Blocksize = 128 << r.IntN(10)
		}
		c, err := blosc.Encode(bloscLZData(r, 1+r.IntN(1<<r.IntN(21))), o)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	fixtures, err := filepath.Glob(filepath.Join("..", "zarr", "blosc", "testdata", "fixtures", "numcodecs-blosclz-*.blosc"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no c-blosc blosclz fixtures (%v)", err)
	}
	for _, f := range fixtures {
		c, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	var cases []bloscLZCase
	for _, c := range chunks {
		f, err := blosc.Parse(c)
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.Memcpyed() {
			continue
		}
		for _, s := range f.Streams {
			src := c[s.Src : s.Src+s.CSize]
			cases = append(cases, bloscLZCase{src: src, size: s.Size, want: hostBloscLZ(src, s.Size)})
		}
	}
	good := len(cases)
	damage := func(src []byte, size int) {
		cases = append(cases, bloscLZCase{src: src, size: size, want: hostBloscLZ(src, size)})
	}
	for i := range good {
		c := cases[i]
		n := len(c.src)
		flipped := bytes.Clone(c.src)
		flipped[r.IntN(n)] ^= 1 << r.IntN(8)
		damage(flipped, c.size)
		smashed := bytes.Clone(c.src)
		for range 1 + r.IntN(4) {
			smashed[r.IntN(n)] = byte(r.Uint32())
		}
		damage(smashed, c.size)
		damage(c.src[:r.IntN(n)], c.size)
		damage(c.src, c.size+1)
		damage(c.src, max(c.size-1, 1))
	}
	for range 2000 {
		b := make([]byte, 1+r.IntN(60))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		damage(b, 1+r.IntN(300))
	}
	// A literal, then one match of every kind: near, long (length bytes,
	// 255s among them), far, and one reaching before the start.
	lit := []byte{31}
	for i := range 32 {
		lit = append(lit, byte(i*37))
	}
	for _, m := range [][]byte{
		{0x40, 3}, {0xe0, 0, 0}, {0xe0, 255, 255, 10, 31}, {0xe0, 200, 5}, {0xff, 200, 255, 0, 0},
		{0x3f, 255, 0, 5}, {0x20, 40}, {0xe0, 255}, {0x3f, 255, 0},
	} {
		tok := append(bytes.Clone(lit), m...)
		for size := 1; size < 600; size++ {
			damage(tok, size)
		}
	}
	return cases
}

// bloscLZArgs uploads the arrays of one blosclz launch (stream addresses
// and lengths, output addresses and sizes; room for the sizes written and
// the statuses) into bufs. It runs on the executor.
func bloscLZArgs(bufs *deviceBuffers, ptrs, lens, outs, caps []uint64) (BloscLZArgs, error) {
	n := len(ptrs)
	a := BloscLZArgs{N: n}
	var err error
	for _, x := range []struct {
		p *cuda.DevicePtr
		v []byte
	}{{&a.Ptrs, u64Bytes(ptrs)}, {&a.Lens, u64Bytes(lens)}, {&a.Outs, u64Bytes(outs)}, {&a.Caps, u64Bytes(caps)},
		{&a.Sizes, make([]byte, 8*n)}, {&a.Statuses, make([]byte, 4*n)}} {
		if *x.p, err = bufs.upload(x.v); err != nil {
			return a, err
		}
	}
	return a, nil
}

// runBloscLZ decodes every case on the GPU, each into an output with 64
// poisoned guard bytes on either side, and returns each output, its
// status and size, and whether a guard byte changed.
func runBloscLZ(e *cuda.Executor, k *Kernels, cases []bloscLZCase) (outs [][]byte, statuses []int32, sizes []uint64, guards []bool, err error) {
	const guard = 64
	n := len(cases)
	var in, outBuf []byte
	inOff, outOff := make([]int, n), make([]int, n)
	for i, c := range cases {
		inOff[i] = len(in)
		in = append(in, c.src...)
		outOff[i] = len(outBuf) + guard
		outBuf = append(outBuf, make([]byte, c.size+2*guard)...)
	}
	for i := range outBuf {
		outBuf[i] = poison
	}
	got := make([]byte, len(outBuf))
	st, sz := make([]byte, 4*n), make([]byte, 8*n)
	err = e.Do(func() (err error) {
		var bufs deviceBuffers
		defer func() { err = errors.Join(err, bufs.free()) }()
		dIn, err := bufs.upload(in)
		if err != nil {
			return err
		}
		dOut, err := bufs.upload(outBuf)
		if err != nil {
			return err
		}
		ptrs, lens, outPtrs, caps := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
		for i, c := range cases {
			ptrs[i], lens[i] = uint64(dIn)+uint64(inOff[i]), uint64(len(c.src))
			outPtrs[i], caps[i] = uint64(dOut)+uint64(outOff[i]), uint64(c.size)
		}
		a, err := bloscLZArgs(&bufs, ptrs, lens, outPtrs, caps)
		if err != nil {
			return err
		}
		if err := k.BloscLZ(0, a); err != nil {
			return err
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
		if err := cuda.CopyDtoH(got, dOut); err != nil {
			return err
		}
		if err := cuda.CopyDtoH(st, a.Statuses); err != nil {
			return err
		}
		return cuda.CopyDtoH(sz, a.Sizes)
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	for i, c := range cases {
		o := outOff[i]
		outs = append(outs, got[o:o+c.size])
		statuses = append(statuses, int32(binary.NativeEndian.Uint32(st[4*i:])))
		sizes = append(sizes, binary.NativeEndian.Uint64(sz[8*i:]))
		touched := false
		for _, b := range append(bytes.Clone(got[o-guard:o]), got[o+c.size:o+c.size+guard]...) {
			touched = touched || b != poison
		}
		guards = append(guards, touched)
	}
	return outs, statuses, sizes, guards, nil
}

// TestBloscLZGPU checks the blosclz kernel against the host's blosc
// decoder stream by stream, on good streams of this package's encoder and
// c-blosc's and on damaged ones: a stream decodes on the GPU (status 0,
// its full size) exactly when it decodes on the host, to the same bytes,
// and no stream writes outside its output.
func TestBloscLZGPU(t *testing.T) {
	e, k := gpuKernels(t)
	cases := bloscLZCases(t, newRand(t))
	outs, statuses, sizes, guards, err := runBloscLZ(e, k, cases)
	if err != nil {
		t.Fatal(err)
	}
	decoded, raw, errs := 0, 0, 0
	for i, c := range cases {
		ok := statuses[i] == 0 && sizes[i] == uint64(c.size)
		if guards[i] {
			errs++
			t.Errorf("stream %d (%d bytes, size %d): wrote outside its output", i, len(c.src), c.size)
		}
		switch {
		case ok != (c.want != nil):
			errs++
			t.Errorf("stream %d (%d bytes, size %d): GPU status %d, %d bytes; host decodes it: %v", i, len(c.src), c.size, statuses[i], sizes[i], c.want != nil)
		case ok && !bytes.Equal(outs[i], c.want):
			errs++
			t.Errorf("stream %d (%d bytes, size %d): GPU bytes differ from the host's", i, len(c.src), c.size)
		case !ok && statuses[i] != 12 && statuses[i] != 0:
			// A damaged stream: 12; one that decodes to another size
			// than its output's: 0, the size telling (as nvCOMP's).
			errs++
			t.Errorf("stream %d: failed with status %d, want 12 or 0", i, statuses[i])
		case ok:
			decoded++
			if len(c.src) == c.size {
				raw++
			}
		}
		if errs > 20 {
			t.Fatal("too many errors")
		}
	}
	if decoded == 0 || raw == 0 || decoded == len(cases) {
		t.Errorf("%d of %d streams decoded (%d raw): the cases do not cover both outcomes", decoded, len(cases), raw)
	}
	t.Logf("%d streams, %d decoded (%d raw), %d refused, as on the host", len(cases), decoded, raw, len(cases)-decoded)
}

// BenchmarkBloscLZGPU decodes the zarr benchmark's "compressed" chunks
// (256^3 uint16, blosc blosclz level 9 with bit shuffle, 16 of them) on the
// GPU, and reports GB/s of decoded bytes beside the host decoder's on
// every core (blosc.DecodeNoUnshuffle, a chunk per goroutine).
func BenchmarkBloscLZGPU(b *testing.B) {
	e, k := gpuKernels(b)
	const side, chunks = 256, 16
	var cases []bloscLZCase
	var frames [][]byte
	for c := range chunks {
		vals := make([]byte, 2*side*side*side)
		for i := range side * side * side {
			x, y, z := uint64(i%side), uint64(i/side%side), uint64(i/side/side+c*side)
			binary.LittleEndian.PutUint16(vals[2*i:], uint16(x+y*y/32+z*z*z))
		}
		frame, err := blosc.Encode(vals, blosc.Options{Compressor: blosc.BloscLZ, Level: 9, Shuffle: blosc.BitShuffle, Typesize: 2})
		if err != nil {
			b.Fatal(err)
		}
		frames = append(frames, frame)
		f, err := blosc.Parse(frame)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range f.Streams {
			cases = append(cases, bloscLZCase{src: frame[s.Src : s.Src+s.CSize], size: s.Size})
		}
	}
	total := int64(chunks * 2 * side * side * side)
	b.SetBytes(total)
	var gpu time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, statuses, _, _, err := runBloscLZ(e, k, cases); err != nil || statuses[0] != 0 {
			b.Fatal(err, statuses[0])
		}
		gpu += time.Since(t0)
	}
	// The kernel alone: runBloscLZ's copies excluded.
	kernel := timeBloscLZKernel(b, e, k, cases)
	t0 := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, f := range frames {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out := make([]byte, 2*side*side*side)
			if _, err := blosc.DecodeNoUnshuffle(out, f); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	host := time.Since(t0)
	b.ReportMetric(float64(total)/kernel.Seconds()/1e9, "kernel-GB/s")
	b.ReportMetric(float64(total)/host.Seconds()/1e9, "host-GB/s")
	b.ReportMetric(float64(len(cases)), "streams")
}

// timeBloscLZKernel times one launch over cases already on the device
// with CUDA events.
func timeBloscLZKernel(b *testing.B, e *cuda.Executor, k *Kernels, cases []bloscLZCase) time.Duration {
	var d time.Duration
	err := e.Do(func() (err error) {
		var bufs deviceBuffers
		defer func() { err = errors.Join(err, bufs.free()) }()
		n := len(cases)
		var in []byte
		var outBytes uint64
		ptrs, lens, outs, caps := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
		for i, c := range cases {
			ptrs[i], lens[i], caps[i], outs[i] = uint64(len(in)), uint64(len(c.src)), uint64(c.size), outBytes
			in = append(in, c.src...)
			outBytes += uint64(c.size)
		}
		dIn, err := bufs.upload(in)
		if err != nil {
			return err
		}
		dOut, err := bufs.alloc(int(outBytes))
		if err != nil {
			return err
		}
		for i := range n {
			ptrs[i] += uint64(dIn)
			outs[i] += uint64(dOut)
		}
		a, err := bloscLZArgs(&bufs, ptrs, lens, outs, caps)
		if err != nil {
			return err
		}
		if err := k.BloscLZ(0, a); err != nil { // warm
			return err
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
		const reps = 5
		t0 := time.Now()
		for range reps {
			if err := k.BloscLZ(0, a); err != nil {
				return err
			}
		}
		if err := cuda.Synchronize(); err != nil {
			return err
		}
		d = time.Since(t0) / reps
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}
