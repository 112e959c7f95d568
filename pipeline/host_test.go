package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// storeCase is one array written for the end-to-end tests.
type storeCase struct {
	name string
	spec writer.Spec
}

var e2eDtypes = []zarr.DataType{zarr.Bool, zarr.Int8, zarr.Int16, zarr.Int32, zarr.Int64, zarr.Uint8,
	zarr.Uint16, zarr.Uint32, zarr.Uint64, zarr.Float16, zarr.Float32, zarr.Float64}

var e2eCodecs = []struct {
	name string
	c    writer.Compression
}{
	{"raw", writer.Compression{}},
	{"zstd", writer.Compression{Codec: writer.Zstd, Level: 3}},
	{"zstd-crc", writer.Compression{Codec: writer.Zstd, Level: 1, Checksum: true}},
	{"blosc-lz4-shuffle", writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.ByteShuffle}},
	{"blosc-zstd-bitshuffle", writer.Compression{Codec: writer.Blosc, Level: 3, BloscCompressor: blosc.Zstd, Shuffle: blosc.BitShuffle}},
	{"gzip", writer.Compression{Codec: writer.Gzip, Level: 1}},
	{"lz4", writer.Compression{Codec: writer.LZ4}},
}

// writeCase writes an array filled with synthetic data (noisy, with a
// fraction of random voxels, and whole chunks of fill so that some chunks
// and shards are missing).
func writeCase(t testing.TB, dir string, sc storeCase, seed uint64) string {
	t.Helper()
	path := filepath.Join(dir, sc.name)
	a, err := writer.Create(path, sc.spec)
	if err != nil {
		t.Fatalf("%s: %v", sc.name, err)
	}
	noise := 3
	if sc.spec.DataType == zarr.Bool {
		noise = 1
	}
	syn := &writer.Synth{Seed: seed, DataType: sc.spec.DataType, Shape: sc.spec.Shape, Amplitude: 0.5, NoiseBits: noise, RandomFraction: 0.2}
	chunk := sc.spec.ChunkShape
	err = a.WriteFrom(context.Background(), 2, func(dst []byte, box []zarr.Range) error {
		if err := syn.Fill(dst, box); err != nil {
			return err
		}
		// Blank out the first chunk along axis 0 of every block to the fill
		// value (0) so SkipEmptyChunks leaves chunks (and, for small
		// shards, shards) out.
		size := sc.spec.DataType.Size()
		row := int64(size)
		for _, r := range box[1:] {
			row *= r.Len()
		}
		if box[0].Start%(chunk[0]*3) == 0 {
			n := min(chunk[0], box[0].Len()) * row
			clear(dst[:n])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: writing: %v", sc.name, err)
	}
	return path
}

// expected converts a region read by the reference reader to the output
// dtype, as the engines must.
func expected(r *zarr.Region, out Dtype) []byte {
	dt, _ := plan.Dtype(r.DataType)
	size := r.DataType.Size()
	n := len(r.Data) / size
	b := make([]byte, n*out.Size())
	for i := range n {
		var e [8]byte
		copy(e[:], r.Data[i*size:(i+1)*size])
		f := ptx.Float32Bits(dt, binary.LittleEndian.Uint64(e[:]))
		if out == BF16 {
			binary.LittleEndian.PutUint16(b[2*i:], ptx.BFloat16Bits(f))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], f)
		}
	}
	return b
}

// randomBox draws a box of the given extents whose start may lie up to
// half an extent outside the array on either side.
func randomBox(rng *rand.Rand, shape []int64, ext []int) []Range {
	box := make([]Range, len(shape))
	for k := range shape {
		lo := -int64(ext[k]) / 2
		hi := shape[k] - int64(ext[k])/2
		s := lo + rng.Int64N(hi-lo+1)
		box[k] = Range{Start: s, Stop: s + int64(ext[k])}
	}
	return box
}

// newTestRand returns a generator seeded by zarrtest.Seed, which logs the
// seed (DAMACY_SEED replays it).
func newTestRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := zarrtest.Seed(t)
	return rand.New(rand.NewPCG(seed, 7))
}

// checkEngine streams nBoxes random boxes of every path through a pipeline
// of cfg and compares each sample with the reference reader.
func checkEngine(t *testing.T, cfg Config, paths []string, nBoxes int, seed uint64) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	checkPipeline(t, p, cfg, paths, nBoxes, seed)
}

// checkPipeline is checkEngine on pipeline p, of cfg.
func checkPipeline(t *testing.T, p *Pipeline, cfg Config, paths []string, nBoxes int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var err error
	arrays := map[string]*zarr.Array{}
	var samples []Sample
	for i := range nBoxes {
		path := paths[i%len(paths)]
		a := arrays[path]
		if a == nil {
			if a, err = zarr.Open(path); err != nil {
				t.Fatal(err)
			}
			arrays[path] = a
		}
		samples = append(samples, Sample{URI: path, Box: randomBox(rng, a.Shape(), cfg.SampleShape)})
	}
	go func() {
		p.Push(samples...)
		p.Flush()
	}()
	ctx := context.Background()
	got := 0
	for got < len(samples) {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("Pop after %d samples: %v", got, err)
		}
		per := len(b.Bytes()) / b.Len()
		for i, s := range b.Samples() {
			reg, err := arrays[s.URI].ReadRegion(s.Box)
			if err != nil {
				t.Fatal(err)
			}
			want := expected(reg, cfg.Dtype)
			have := b.Bytes()[i*per : (i+1)*per]
			if string(want) != string(have) {
				t.Fatalf("sample %s (%s out): %s", s, cfg.Dtype, firstDiff(have, want, cfg.Dtype.Size()))
			}
		}
		got += b.Len()
		b.Release()
	}
	st := p.Stats()
	t.Logf("%d batches, %d waves (%d shared), %d chunks decoded (%d bytes)", st.BatchesEmitted, st.WavesEmitted, st.WavesShared, st.ChunksDecoded, st.Decompress.OutBytes)
}

func firstDiff(have, want []byte, size int) string {
	if len(have) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(have), len(want))
	}
	for i := 0; i < len(have); i += size {
		if string(have[i:i+size]) != string(want[i:i+size]) {
			return fmt.Sprintf("element %d is %x, want %x", i/size, have[i:i+size], want[i:i+size])
		}
	}
	return "equal"
}

// TestHostEngineMatchesReference checks the host engine against the
// reference reader for every dtype, codec and output dtype, over random
// boxes that reach outside the arrays, with missing chunks and shards.
func TestHostEngineMatchesReference(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	for ci, codec := range e2eCodecs {
		for di, dt := range e2eDtypes {
			sc := storeCase{
				name: fmt.Sprintf("%s-%s", codec.name, dt),
				spec: writer.Spec{Shape: []int64{37, 29, 20}, ChunkShape: []int64{8, 8, 8}, DataType: dt,
					Compression: codec.c, SkipEmptyChunks: true},
			}
			// Vary the layout along the matrix: sharded or not, index at
			// start, big-endian, F order, zarr v2.
			switch (ci + di) % 5 {
			case 0:
				sc.spec.ShardShape = []int64{16, 16, 8}
			case 1:
				sc.spec.ShardShape, sc.spec.IndexAtStart = []int64{8, 16, 16}, true
			case 2:
				sc.spec.BigEndian = dt.Size() > 1
			case 3:
				sc.spec.Order = 'F'
			case 4:
				sc.spec.Format = 2
			}
			if sc.spec.Format == 2 && codec.c.Codec == writer.Zstd && codec.c.Checksum {
				sc.spec.Format = 3
			}
			path := writeCase(t, dir, sc, seed+uint64(ci*100+di))
			t.Run(sc.name, func(t *testing.T) {
				for _, out := range []Dtype{F32, BF16} {
					cfg := Config{BatchSize: 5, SampleShape: []int{9, 11, 6}, Dtype: out, Device: "cpu",
						HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2}
					checkEngine(t, cfg, []string{path}, 24, seed)
				}
			})
		}
	}
}

// TestHostEngineWaves forces many waves per batch (small buffers) and
// several arrays per batch, and checks the result and the stats.
func TestHostEngineWaves(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	var paths []string
	for i, dt := range []zarr.DataType{zarr.Uint16, zarr.Float32, zarr.Uint8} {
		sc := storeCase{name: fmt.Sprint("a", i), spec: writer.Spec{Shape: []int64{64, 64, 64}, ChunkShape: []int64{16, 16, 16},
			ShardShape: []int64{32, 64, 64}, DataType: dt, Compression: writer.Compression{Codec: writer.Zstd}}}
		paths = append(paths, writeCase(t, dir, sc, seed+uint64(i)))
	}
	var mu sync.Mutex
	stages := map[string]int{}
	lanes := map[string]bool{}
	cfg := Config{BatchSize: 12, SampleShape: []int{40, 40, 40}, Device: "cpu", HostBufferBytes: 3 << 20,
		DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 3, IOThreads: 3,
		Trace: func(s Span) {
			mu.Lock()
			defer mu.Unlock()
			if s.End.Before(s.Start) {
				t.Errorf("span %+v ends before it starts", s)
			}
			stages[s.Stage]++
			lanes[s.Lane] = true
		}}
	checkEngine(t, cfg, paths, 40, seed)
	mu.Lock()
	defer mu.Unlock()
	for _, st := range []string{"plan", "read", "decode", "assemble", "pop"} {
		if stages[st] == 0 {
			t.Errorf("no %q spans traced (got %v)", st, stages)
		}
	}
	if !lanes["io worker 0"] || !lanes["cpu worker 0"] {
		t.Errorf("worker lanes missing from the trace: %v", lanes)
	}
	if stages["assemble"] <= stages["plan"] {
		t.Errorf("%d assemble spans for %d batches: the small buffers should cut batches into several waves", stages["assemble"], stages["plan"])
	}
}

// newChecked starts a pipeline whose Close, at the end of the test, is
// followed by checks that no batch slot is still out and no goroutine of
// the pipeline is left running.
func newChecked(t *testing.T, cfg Config) *Pipeline {
	t.Helper()
	before := runtime.NumGoroutine()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := p.Stats().SlotsInUse; n != 0 {
			t.Errorf("%d batch slots still in use at the end", n)
		}
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkGoroutines(t, before)
	})
	return p
}

// pushAll pushes samples into p and flushes it, failing the test on an
// error.
func pushAll(t *testing.T, p *Pipeline, samples ...Sample) {
	t.Helper()
	if err := p.Push(samples...); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestHostEngineErrors(t *testing.T) {
	dir := t.TempDir()
	sc := storeCase{name: "z", spec: writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8}, ShardShape: []int64{16, 16},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd}}}
	path := writeCase(t, dir, sc, 1)
	cfg := Config{BatchSize: 1, SampleShape: []int{8, 8}, Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10}
	ctx := context.Background()

	t.Run("missing array", func(t *testing.T) {
		p := newChecked(t, cfg)
		p.Push(Sample{URI: filepath.Join(dir, "nope"), Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}}, Sample{URI: path, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		if _, err := p.Pop(ctx); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Pop: %v, want ErrNotFound", err)
		}
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("the batch after a failed one: %v", err)
		}
		b.Release()
	})
	t.Run("corrupt chunk", func(t *testing.T) {
		shard := filepath.Join(path, "c", "1", "1")
		data, err := os.ReadFile(shard)
		if err != nil {
			t.Fatal(err)
		}
		// Break the zstd magic of the shard's first chunk (the index is at
		// the end; chunk (0,0) of the shard comes first).
		for i := 0; i < 4; i++ {
			data[i] ^= 0x5a
		}
		if err := os.WriteFile(shard, data, 0o644); err != nil {
			t.Fatal(err)
		}
		p := newChecked(t, cfg)
		p.Push(Sample{URI: path, Box: []Range{{Start: 16, Stop: 24}, {Start: 16, Stop: 24}}})
		_, err = p.Pop(ctx)
		if !errors.Is(err, ErrDecode) {
			t.Fatalf("Pop of a corrupt chunk: %v, want ErrDecode", err)
		}
		t.Log(err)
	})
	t.Run("truncated shard", func(t *testing.T) {
		shard := filepath.Join(path, "c", "0", "1")
		data, err := os.ReadFile(shard)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shard, data[:len(data)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		p := newChecked(t, cfg)
		p.Push(Sample{URI: path, Box: []Range{{Start: 0, Stop: 8}, {Start: 16, Stop: 24}}})
		_, err = p.Pop(ctx)
		if !errors.Is(err, ErrDecode) {
			t.Fatalf("Pop of a truncated shard: %v, want ErrDecode", err)
		}
		t.Log(err)
	})
	t.Run("unreadable shard", func(t *testing.T) {
		// A directory where a shard file should be: reading it fails (a
		// permission change would not stop root).
		shard := filepath.Join(path, "c", "0", "0")
		if err := os.Remove(shard); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(shard, 0o755); err != nil {
			t.Fatal(err)
		}
		p := newChecked(t, cfg)
		p.Push(Sample{URI: path, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}}, Sample{URI: path, Box: []Range{{Start: 24, Stop: 32}, {Start: 24, Stop: 32}}})
		_, err := p.Pop(ctx)
		if !errors.Is(err, ErrStorage) {
			t.Fatalf("Pop of an unreadable shard: %v, want ErrStorage", err)
		}
		t.Log(err)
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("the batch after: %v", err)
		}
		b.Release()
	})
	t.Run("close during pop", func(t *testing.T) {
		p := newChecked(t, cfg)
		errc := make(chan error, 1)
		go func() {
			_, err := p.Pop(ctx) // nothing pushed: blocks
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		p.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrShutdown) {
				t.Fatalf("Pop during Close: %v, want ErrShutdown", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Pop still blocked after Close")
		}
	})
	t.Run("cancelled pop", func(t *testing.T) {
		p := newChecked(t, cfg)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := p.Pop(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Pop with an expiring context: %v", err)
		}
	})
	t.Run("budget", func(t *testing.T) {
		_, err := New(Config{SampleShape: []int{8, 8}, Device: "cpu", MaxChunkBytes: 4 << 20, DeviceBufferBytes: 2 << 20})
		if !errors.Is(err, ErrBudget) {
			t.Fatalf("New with an arena smaller than one chunk: %v, want ErrBudget", err)
		}
		t.Log(err)
	})
}

// TestHostEngineChunkSizes mixes, in the same batches, chunks small enough
// for a CPU worker's scratch buffer and chunks larger than it, which are
// decoded into the arena, for each source type the one-pass row
// conversion takes (and one it does not), and checks every box against
// the reference reader.
func TestHostEngineChunkSizes(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	for di, dt := range []zarr.DataType{zarr.Uint16, zarr.Int16, zarr.Uint8, zarr.Float32} {
		// 64x96x96 chunks hold more than hostScratchBytes for every type
		// but uint8; 64x96x192 uint8 ones do too.
		big := []int64{64, 96, 96}
		if dt == zarr.Uint8 {
			big = []int64{64, 96, 192}
		}
		if n := int64(dt.Size()) * big[0] * big[1] * big[2]; n <= hostScratchBytes {
			t.Fatalf("%s: a big chunk of %d bytes fits the scratch buffer", dt, n)
		}
		zstd := writer.Compression{Codec: writer.Zstd, Level: 1}
		paths := []string{
			writeCase(t, dir, storeCase{name: fmt.Sprintf("big-%s", dt), spec: writer.Spec{Shape: []int64{100, 150, 200}, ChunkShape: big, DataType: dt, Compression: zstd}}, seed+uint64(di)),
			writeCase(t, dir, storeCase{name: fmt.Sprintf("small-%s", dt), spec: writer.Spec{Shape: []int64{100, 150, 200}, ChunkShape: []int64{16, 32, 32}, ShardShape: []int64{32, 64, 64}, DataType: dt, Compression: zstd}}, seed+uint64(di)+10),
		}
		t.Run(dt.String(), func(t *testing.T) {
			for _, out := range []Dtype{F32, BF16} {
				cfg := Config{BatchSize: 4, SampleShape: []int{40, 50, 70}, Dtype: out, Device: "cpu",
					HostBufferBytes: 16 << 20, DeviceBufferBytes: 16 << 20, MaxChunkBytes: 4 << 20, ComputeThreads: 2, IOThreads: 2}
				checkEngine(t, cfg, paths, 16, seed)
			}
		})
	}
}

// TestHostCloseMidBatch closes the host engine while batches of many
// waves are being assembled: the slot a batch took for its first wave
// comes back even though the batch is never emitted.
func TestHostCloseMidBatch(t *testing.T) {
	dir := t.TempDir()
	seed := zarrtest.Seed(t)
	shape := []int64{96, 96, 96}
	path := writeCase(t, dir, storeCase{name: "a", spec: writer.Spec{Shape: shape, ChunkShape: []int64{16, 16, 16},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}}, seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	// 4 boxes of 48^3 touch about 2 MiB of decoded chunks: two or three
	// waves per batch in a 1 MiB arena.
	ext := []int{48, 48, 48}
	var samples []Sample
	for range 48 {
		samples = append(samples, Sample{URI: path, Box: randomBox(rng, shape, ext)})
	}
	for round := range 10 {
		cfg := Config{BatchSize: 4, SampleShape: ext, Dtype: F32, Device: "cpu", BatchSlots: 2,
			HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2}
		before := runtime.NumGoroutine()
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Push(samples...); err != nil {
			t.Fatal(err)
		}
		b, err := p.Pop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
		// Close at a different point of the next batch's waves each round.
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if n := p.Stats().SlotsInUse; n != 0 {
			t.Fatalf("round %d: %d batch slots still out after Close", round, n)
		}
		checkGoroutines(t, before)
	}
}
