package nvcomp

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/zarr/zarrtest"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// benchEnv names the environment variable that enables
// TestDecodeThroughput.
const benchEnv = "DAMACY_NVCOMP_BENCH"

// benchSet is the compressed data of one table section: the same 256 MiB
// of microscopy-like uint16 data cut into chunks of one size.
type benchSet struct {
	data, codec string
	chunk       int
	raw, comp   [][]byte
}

func (s *benchSet) ratio() float64 {
	var c int
	for _, b := range s.comp {
		c += len(b)
	}
	return float64(len(s.raw)*s.chunk) / float64(c)
}

// parallel runs f(i) for i in [0, n) on GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// newBenchSet generates and compresses the data of one section. Each chunk
// has its own phase and frequency, so no two chunks are alike.
func newBenchSet(t testing.TB, data, codec string, chunk int, total int, seed uint64) *benchSet {
	s := &benchSet{data: data, codec: codec, chunk: chunk}
	n := total / chunk
	s.raw, s.comp = make([][]byte, n), make([][]byte, n)
	parallel(n, func(i int) {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		b := smoothU16(r, chunk, 256, 4)
		if data == "u16 shuffled" {
			b = shuffle2(b)
		}
		s.raw[i] = b
		if codec == "zstd" {
			s.comp[i] = zstdEncode(t, b, zstd.SpeedDefault, false)
		} else {
			s.comp[i] = lz4Encode(t, b, false)
		}
	})
	return s
}

// cpuThroughput decodes the set's chunks on GOMAXPROCS goroutines, round
// after round for at least half a second, and returns GB/s of output.
func cpuThroughput(t testing.TB, s *benchSet) float64 {
	procs := runtime.GOMAXPROCS(0)
	var decoded atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Bool
	for g := range procs {
		wg.Go(func() {
			dst := make([]byte, s.chunk)
			d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
			defer d.Close()
			for i := g; time.Since(start) < 500*time.Millisecond || i < len(s.comp); i += procs {
				c := s.comp[i%len(s.comp)]
				var err error
				if s.codec == "zstd" {
					_, err = d.DecodeAll(c, dst[:0])
				} else {
					_, err = lz4.UncompressBlock(c, dst)
				}
				if err != nil {
					failed.Store(true)
					return
				}
				decoded.Add(int64(s.chunk))
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		t.Fatalf("%s %s %d: CPU decode failed", s.codec, s.data, s.chunk)
	}
	return float64(decoded.Load()) / time.Since(start).Seconds() / 1e9
}

// gpuResult is one row's GPU measurement.
type gpuResult struct {
	gbps    float64       // GB/s of output, timed with events
	enqueue time.Duration // host time of one Decode call on an idle stream
	temp    int           // temp bytes of the decoder
}

// gpuThroughput decodes batches of the set's chunks (chunk i of a batch is
// compressed chunk i mod len(comp)) into distinct outputs: two warm-up
// calls, whose statuses, sizes and a sample of outputs are checked, then
// enough timed calls for about 4 GiB of output (5 at least), between two
// events on one stream.
func gpuThroughput(t testing.TB, lib *Library, e *cuda.Executor, s *benchSet, in cuda.DevicePtr, inOff []int, out cuda.DevicePtr, batch int) gpuResult {
	var res gpuResult
	alg := Zstd
	if s.codec == "lz4" {
		alg = LZ4
	}
	err := e.Do(func() error {
		dec, err := lib.NewDecoder(DecoderConfig{Algorithm: alg, MaxChunks: batch, MaxChunkBytes: s.chunk})
		if err != nil {
			return err
		}
		defer dec.Close()
		res.temp = dec.TempBytes()
		n := batch
		m := make([]uint64, 6*n)
		for i := range n {
			k := i % len(s.comp)
			m[i], m[n+i] = uint64(in)+uint64(inOff[k]), uint64(len(s.comp[k]))
			m[2*n+i], m[3*n+i] = uint64(out)+uint64(i*s.chunk), uint64(s.chunk)
		}
		meta, err := cuda.MemAlloc(8 * len(m))
		if err != nil {
			return err
		}
		defer meta.Free()
		if err := cuda.CopyHtoD(meta, u64bytes(m)); err != nil {
			return err
		}
		b := &Batch{N: n, CompressedPtrs: meta, CompressedBytes: meta + cuda.DevicePtr(8*n), OutputPtrs: meta + cuda.DevicePtr(16*n),
			OutputCapacities: meta + cuda.DevicePtr(24*n), TotalCapacity: n * s.chunk,
			OutputSizes: meta + cuda.DevicePtr(32*n), Statuses: meta + cuda.DevicePtr(40*n)}
		st, err := cuda.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer st.Destroy()
		start, err := cuda.NewEvent(cuda.EventDefault)
		if err != nil {
			return err
		}
		defer start.Destroy()
		stop, err := cuda.NewEvent(cuda.EventDefault)
		if err != nil {
			return err
		}
		defer stop.Destroy()
		for range 2 {
			if err := dec.Decode(st, b); err != nil {
				return err
			}
		}
		if err := st.Synchronize(); err != nil {
			return err
		}
		if err := cuda.CopyDtoH(u64bytes(m), meta); err != nil {
			return err
		}
		for i := range n {
			if err := CheckChunk(i, statusAt(m, n, i), m[4*n+i], s.chunk); err != nil {
				return err
			}
		}
		got := make([]byte, s.chunk)
		for _, i := range []int{0, n / 2, n - 1} {
			if err := cuda.CopyDtoH(got, out+cuda.DevicePtr(i*s.chunk)); err != nil {
				return err
			}
			if !bytes.Equal(got, s.raw[i%len(s.raw)]) {
				return fmt.Errorf("chunk %d of the batch decoded to different bytes", i)
			}
		}
		// Host time of one call on an idle stream: the median of five.
		var calls []time.Duration
		for range 5 {
			t0 := time.Now()
			if err := dec.Decode(st, b); err != nil {
				return err
			}
			calls = append(calls, time.Since(t0))
			if err := st.Synchronize(); err != nil {
				return err
			}
		}
		slices.Sort(calls)
		res.enqueue = calls[2]
		iters := min(max(5, (4<<30)/(n*s.chunk)), 200)
		if err := start.Record(st); err != nil {
			return err
		}
		for range iters {
			if err := dec.Decode(st, b); err != nil {
				return err
			}
		}
		if err := stop.Record(st); err != nil {
			return err
		}
		if err := stop.Synchronize(); err != nil {
			return err
		}
		el, err := cuda.EventElapsedTime(start, stop)
		if err != nil {
			return err
		}
		res.gbps = float64(iters*n*s.chunk) / el.Seconds() / 1e9
		return nil
	})
	if err != nil {
		t.Fatalf("%s %s %d × %d: %v", s.codec, s.data, batch, s.chunk, err)
	}
	return res
}

// benchSectionEnv names the variable that makes TestThroughputSection
// measure one section ("codec/data/chunk bytes") and append its rows to a
// file ("...;path").
const benchSectionEnv = "DAMACY_NVCOMP_BENCH_SECTION"

// TestDecodeThroughput measures nvCOMP's batched decode throughput for
// zstd (klauspost default level, about zstd 3) and LZ4 (fast) at 64 KiB,
// 256 KiB and 1 MiB chunks in batches of 64 to 4096 chunks (zstd up to
// MaxZstdBatchBytes), next to the
// CPU decoders (klauspost, pierrec) on GOMAXPROCS goroutines, on 256 MiB of
// smooth uint16 data with 4 bits of noise, plain and byte-shuffled, and
// prints a table. Each section runs in a child process (TestThroughputSection),
// so that a fault loses one section only. Set DAMACY_NVCOMP_BENCH=1 to run
// it; it needs a GPU with about 20 GB free.
func TestDecodeThroughput(t *testing.T) {
	if os.Getenv(benchEnv) != "1" {
		t.Skipf("set %s=1 to measure decode throughput", benchEnv)
	}
	lib, e := gpuEnv(t)
	var name string
	if err := e.Do(func() (err error) { name, err = e.Device().Name(); return err }); err != nil {
		t.Fatal(err)
	}
	rows := filepath.Join(t.TempDir(), "rows.txt")
	var tab strings.Builder
	fmt.Fprintf(&tab, "GPU %s, nvCOMP %s (CUDA runtime %d.%d); CPU: %d goroutines (GOMAXPROCS), %d CPUs\n",
		name, lib.Version, lib.CUDARuntime.Major, lib.CUDARuntime.Minor, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(&tab, "%-5s %-13s %7s %6s | %6s %10s %10s %9s | %10s\n",
		"codec", "data", "chunk", "ratio", "batch", "GPU GB/s", "enqueue", "temp MiB", "CPU GB/s")
	seed := zarrtest.Seed(t)
	for _, data := range []string{"u16", "u16 shuffled"} {
		for _, codec := range []string{"zstd", "lz4"} {
			for _, chunk := range []int{64 << 10, 256 << 10, 1 << 20} {
				section := fmt.Sprintf("%s/%s/%d", codec, data, chunk)
				cmd := exec.Command(os.Args[0], "-test.run=^TestThroughputSection$", "-test.count=1", "-test.timeout=5m")
				cmd.Env = append(os.Environ(), benchSectionEnv+"="+section+";"+rows, fmt.Sprintf("%s=%d", zarrtest.SeedEnv, seed))
				if out, err := cmd.CombinedOutput(); err != nil {
					lines := strings.Split(strings.TrimSpace(string(out)), "\n")
					f, ferr := os.OpenFile(rows, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
					if ferr != nil {
						t.Fatal(ferr)
					}
					fmt.Fprintf(f, "%s: the rest of the section failed: %v: %s\n", section, err, lines[max(0, len(lines)-3):])
					f.Close()
				}
			}
		}
	}
	b, err := os.ReadFile(rows)
	if err != nil {
		t.Fatal(err)
	}
	tab.Write(b)
	t.Logf("decode throughput, GB/s of output:\n%s", tab.String())
}

// TestThroughputSection measures one section of TestDecodeThroughput's
// table; it runs only as that test's child.
func TestThroughputSection(t *testing.T) {
	env := os.Getenv(benchSectionEnv)
	if env == "" {
		t.Skip("runs only as a child of TestDecodeThroughput")
	}
	spec, rows, _ := strings.Cut(env, ";")
	parts := strings.Split(spec, "/")
	if len(parts) != 3 {
		t.Fatalf("%s=%q: want codec/data/chunk;path", benchSectionEnv, env)
	}
	codec, data := parts[0], parts[1]
	chunk, err := strconv.Atoi(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(rows, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lib, e := gpuEnv(t)
	s := newBenchSet(t, data, codec, chunk, 256<<20, zarrtest.Seed(t))
	cpu := cpuThroughput(t, s)
	var in, out cuda.DevicePtr
	inOff := make([]int, len(s.comp))
	var host []byte
	for i, c := range s.comp {
		inOff[i] = len(host)
		host = append(host, c...)
		host = append(host, make([]byte, (16-len(host)%16)%16)...)
	}
	if err := e.Do(func() (err error) {
		if out, err = cuda.MemAlloc(4096 * chunk); err != nil {
			return err
		}
		if in, err = cuda.MemAlloc(len(host)); err != nil {
			return err
		}
		return cuda.CopyHtoD(in, host)
	}); err != nil {
		t.Fatal(err)
	}
	defer e.Do(func() error { return errors.Join(in.Free(), out.Free()) })
	for _, batch := range []int{64, 256, 512, 1024, 2048, 4096} {
		if codec == "zstd" && batch*chunk > MaxZstdBatchBytes {
			fmt.Fprintf(f, "%-5s %-13s %6dK %6.2f | %6d   over MaxZstdBatchBytes\n", codec, data, chunk>>10, s.ratio(), batch)
			continue
		}
		g := gpuThroughput(t, lib, e, s, in, inOff, out, batch)
		fmt.Fprintf(f, "%-5s %-13s %6dK %6.2f | %6d %10.1f %9.1fµs %9.0f | %10.1f\n",
			codec, data, chunk>>10, s.ratio(), batch, g.gbps, float64(g.enqueue)/1e3, float64(g.temp)/(1<<20), cpu)
		f.Sync()
	}
}
