package dlpack_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/dlpack"
	"github.com/damacy-go/damacy/dlpack/internal/pyembed"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// This file is the end-to-end proof of the pipeline's DLPack export: a
// real consumer, PyTorch in the embedded interpreter, takes every batch
// zero-copy, and each batch equals, bit for bit, what tensorstore reads
// for the same boxes (testdata/pipeline_torch.py).

// torchSampleShape is the extent of every box; all the test's arrays are
// 3-dimensional so that one pipeline reads them all.
var torchSampleShape = []int{9, 20, 17}

// torchSource is one array (or OME-NGFF level) that samples come from.
type torchSource struct {
	uri   string
	level int
	shape []int64 // of the level read
}

// torchStore is an array the test writes.
type torchStore struct {
	name string
	spec writer.Spec
	fill []byte // one element of the fill value, little-endian
}

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }

// torchStores covers the formats: sharded zarr v3 uint16 with
// zstd, sharded float32 with blosc-lz4 and byte shuffle (NaN fill, index
// at the start), and an unsharded F-order int8 zarr v2 array. Every fill
// value is nonzero, so padding with the wrong value shows.
var torchStores = []torchStore{
	{"u16-zstd", writer.Spec{Shape: []int64{37, 75, 70}, ChunkShape: []int64{8, 16, 16}, ShardShape: []int64{16, 32, 32},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3}, Fill: writer.FillUint(1000),
		SkipEmptyChunks: true}, le16(1000)},
	{"f32-blosc-lz4", writer.Spec{Shape: []int64{30, 64, 81}, ChunkShape: []int64{8, 16, 32}, ShardShape: []int64{16, 32, 64},
		IndexAtStart: true, DataType: zarr.Float32, Fill: writer.FillFloat(math.NaN()), SkipEmptyChunks: true,
		Compression: writer.Compression{Codec: writer.Blosc, Level: 5, BloscCompressor: blosc.LZ4, Shuffle: blosc.ByteShuffle}},
		binary.LittleEndian.AppendUint32(nil, 0x7fc00000)},
	{"i8-v2-forder", writer.Spec{Format: 2, Shape: []int64{25, 50, 47}, ChunkShape: []int64{8, 16, 16}, Order: 'F',
		DataType: zarr.Int8, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}, Fill: writer.FillInt(-5),
		SkipEmptyChunks: true}, []byte{0xfb}},
}

// torchNGFF is an OME-NGFF 0.5 image read at level 1: mean-downsampled
// from a level 0 of fresh random data.
var torchNGFF = torchStore{"ngff", writer.Spec{Shape: []int64{40, 96, 90}, ChunkShape: []int64{8, 16, 16},
	ShardShape: []int64{16, 32, 32}, DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 3},
	Fill: writer.FillUint(3), SkipEmptyChunks: true}, le16(3)}

// synthFill returns a WriteFrom source of random data in which every third
// chunk row along axis 0 holds the fill value, so that SkipEmptyChunks
// leaves those chunks (and some shards) out and readers pad them.
func synthFill(st torchStore, seed uint64) func(dst []byte, box []zarr.Range) error {
	syn := &writer.Synth{Seed: seed, DataType: st.spec.DataType, Shape: st.spec.Shape, Amplitude: 0.5, NoiseBits: 3, RandomFraction: 0.3}
	c0 := st.spec.ChunkShape[0]
	return func(dst []byte, box []zarr.Range) error {
		if err := syn.Fill(dst, box); err != nil {
			return err
		}
		if box[0].Start%(3*c0) == 0 {
			row := int64(len(dst)) / box[0].Len()
			for i := range min(c0, box[0].Len()) * row / int64(len(st.fill)) {
				copy(dst[i*int64(len(st.fill)):], st.fill)
			}
		}
		return nil
	}
}

// writeTorchStores writes the arrays and the OME-NGFF group into dir and
// returns the sources samples are drawn from.
func writeTorchStores(t *testing.T, dir string, seed uint64) []torchSource {
	t.Helper()
	ctx := context.Background()
	var srcs []torchSource
	for i, st := range torchStores {
		a, err := writer.Create(filepath.Join(dir, st.name), st.spec)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if err := a.WriteFrom(ctx, 2, synthFill(st, seed+uint64(i))); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		srcs = append(srcs, torchSource{uri: a.Dir(), shape: st.spec.Shape})
	}
	ms, err := writer.CreateNGFF(filepath.Join(dir, torchNGFF.name), writer.NGFFSpec{
		Axes:   []writer.Axis{{Name: "z", Type: "space"}, {Name: "y", Type: "space"}, {Name: "x", Type: "space"}},
		Levels: 3, Array: torchNGFF.spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Level(0).WriteFrom(ctx, 2, synthFill(torchNGFF, seed+99)); err != nil {
		t.Fatal(err)
	}
	if err := ms.Downsample(ctx, 2); err != nil {
		t.Fatal(err)
	}
	return append(srcs, torchSource{uri: ms.Dir(), level: 1, shape: ms.Level(1).Spec().Shape})
}

// torchSamples draws n samples from srcs: boxes of torchSampleShape whose
// start lies up to half an extent outside the array on either side, and
// one in eight lying wholly outside it.
func torchSamples(r *rand.Rand, srcs []torchSource, n int) []pipeline.Sample {
	samples := make([]pipeline.Sample, n)
	for i := range samples {
		src := srcs[r.IntN(len(srcs))]
		outside := r.IntN(8) == 0
		box := make([]pipeline.Range, len(src.shape))
		for k, size := range src.shape {
			ext := int64(torchSampleShape[k])
			lo, hi := -ext/2, size-ext/2
			if outside && k == 0 {
				lo, hi = size, size+ext
			}
			s := lo + r.Int64N(hi-lo+1)
			box[k] = pipeline.Range{Start: s, Stop: s + ext}
		}
		samples[i] = pipeline.Sample{URI: src.uri, Level: src.level, Box: box}
	}
	return samples
}

// samplesJSON is the samples as the Python side reads them.
func samplesJSON(t *testing.T, samples []pipeline.Sample) string {
	t.Helper()
	type jsonSample struct {
		URI   string     `json:"uri"`
		Level int        `json:"level"`
		Box   [][2]int64 `json:"box"`
	}
	js := make([]jsonSample, len(samples))
	for i, s := range samples {
		js[i] = jsonSample{URI: s.URI, Level: s.Level}
		for _, r := range s.Box {
			js[i].Box = append(js[i].Box, [2]int64{r.Start, r.Stop})
		}
	}
	b, err := json.Marshal(js)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pyStr quotes s as a Python string literal (a JSON string is one).
func pyStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func pyShape(shape []int64) string {
	s := make([]string, len(shape))
	for i, e := range shape {
		s[i] = strconv.FormatInt(e, 10)
	}
	return "(" + strings.Join(s, ", ") + ",)"
}

// requireGPU reports whether DAMACY_REQUIRE_GPU=1: then a GPU test that
// cannot run fails instead of skipping.
func requireGPU() bool { return os.Getenv(cudatest.RequireEnv) == "1" }

// torchConsumer returns the embedded interpreter with numpy, tensorstore,
// torch and testdata/pipeline_torch.py loaded (as the module pt), or skips
// the test saying what is missing; under DAMACY_REQUIRE_GPU=1 it fails.
func torchConsumer(t *testing.T) *pyembed.Interpreter {
	t.Helper()
	var in *pyembed.Interpreter
	t.Run("consumer", func(t *testing.T) {
		py := pyembed.MustStart(t)
		pyembed.MustImport(t, py, "numpy", true)
		pyembed.MustImport(t, py, "tensorstore", true)
		pyembed.MustImport(t, py, "torch", false)
		path, err := filepath.Abs(filepath.Join("testdata", "pipeline_torch.py"))
		if err != nil {
			t.Fatal(err)
		}
		err = py.Exec(fmt.Sprintf(`
import importlib.util
_spec = importlib.util.spec_from_file_location("damacy_pipeline_torch", %s)
pt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pt)
del _spec`, pyStr(path)))
		if err != nil {
			t.Fatal(err)
		}
		if v, err := py.Eval("torch.__version__"); err == nil {
			t.Logf("python %s, torch %s", strings.Fields(py.Version)[0], v)
		}
		in = py
	})
	if in == nil {
		if requireGPU() {
			t.Fatalf("the consumer cannot run (subtest consumer says why), and %s=1", cudatest.RequireEnv)
		}
		t.Skip("no consumer: see the skipped subtest consumer")
	}
	return in
}

// torchRun is one pipeline streamed to torch.
type torchRun struct {
	device string // Config.Device: "cpu" or "cuda"
	dtype  pipeline.Dtype
	format dlpack.Format
	side   bool // CUDA: consume on a new torch stream, not the current one
}

func (c torchRun) String() string {
	s := c.device + "/" + c.dtype.String() + "/" + c.format.String()
	if c.side {
		s += "/side-stream"
	}
	return s
}

var torchRuns = []torchRun{
	{"cpu", pipeline.F32, dlpack.Legacy, false},
	{"cpu", pipeline.BF16, dlpack.Versioned, false},
	{"cuda", pipeline.F32, dlpack.Versioned, true},
	{"cuda", pipeline.F32, dlpack.Legacy, false},
	{"cuda", pipeline.BF16, dlpack.Versioned, false},
	{"cuda", pipeline.BF16, dlpack.Legacy, true},
}

// TestPipelineTorch streams random boxes of sharded zarr v3, zarr v2 and
// OME-NGFF stores through pipelines on the CUDA engine (float32 and
// bfloat16 out, both DLPack formats, the current and a side torch stream)
// and the host engine, and hands every batch to torch.from_dlpack: the
// tensor must view the batch's own memory and equal tensorstore's read of
// the same boxes, cast as the pipeline casts, bit for bit. Every other
// batch is released by the producer while torch still holds it, and
// checked again after the next batch: its slot must not be reused under
// the tensor. At the end every slot is back and Close succeeds.
func TestPipelineTorch(t *testing.T) {
	in := torchConsumer(t)
	seed := zarrtest.Seed(t)
	srcs := writeTorchStores(t, t.TempDir(), seed)
	r := rand.New(rand.NewPCG(seed, 11))
	for _, run := range torchRuns {
		samples := torchSamples(r, srcs, 40)
		t.Run(run.String(), func(t *testing.T) {
			if run.device == "cuda" {
				cudatest.MustHaveGPU(t)
				if ok, err := in.Eval("torch.cuda.is_available()"); err != nil || ok != "True" {
					if requireGPU() {
						t.Fatalf("torch has no CUDA (%s, %v), and %s=1", ok, err, cudatest.RequireEnv)
					}
					t.Skipf("torch has no CUDA (%s, %v)", ok, err)
				}
			}
			streamTorch(t, in, run, samples)
		})
	}
}

// streamTorch runs one pipeline over samples and checks every batch in
// torch.
func streamTorch(t *testing.T, in *pyembed.Interpreter, run torchRun, samples []pipeline.Sample) {
	const batchSize = 6
	cfg := pipeline.Config{BatchSize: batchSize, SampleShape: torchSampleShape, Dtype: run.dtype, Device: run.device,
		HostBufferBytes: 8 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 256 << 10, IOThreads: 4, ComputeThreads: 2}
	p, err := pipeline.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Push(samples...); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := in.Exec(fmt.Sprintf("c = pt.Consumer(%s, %s)", pyStr(wantDevice(run.device)), pyBool(run.side))); err != nil {
		t.Fatal(err)
	}
	defer in.Exec("del c")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	batches := 0
	for got := 0; got < len(samples); batches++ {
		b, err := p.Pop(ctx)
		if err != nil {
			t.Fatalf("Pop after %d samples: %v", got, err)
		}
		checkInfo(t, b, run, batches, min(batchSize, len(samples)-got))
		got += b.Len()
		takeBatch(t, in, b, run)
		if err := in.Exec("c.check_held()"); err != nil {
			t.Fatal(err)
		}
		if batches%2 == 1 {
			// The producer lets go first; torch's tensor keeps the slot.
			b.Release()
			err = in.Exec("c.hold()")
		} else {
			err = in.Exec("c.drop()")
			b.Release()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Exec("c.check_held()"); err != nil {
		t.Fatal(err)
	}
	if want := (len(samples) + batchSize - 1) / batchSize; batches != want {
		t.Errorf("%d batches for %d samples of batch size %d; want %d", batches, len(samples), batchSize, want)
	}
	counts, err := in.Eval("'%d %d' % (c.elements, c.nans)")
	if err != nil {
		t.Fatal(err)
	}
	st := waitSlots(t, p)
	t.Logf("%d batches, %d samples; elements and NaNs compared: %s; engine %s, decoder %s, %d chunks decoded (%d by nvCOMP), %d fills",
		batches, len(samples), counts, st.Engine, st.Decoder, st.ChunksDecoded, st.ChunksGPU, st.ChunksFill)
	if err := p.Close(); err != nil {
		t.Fatalf("Close = %v; want nil", err)
	}
}

func wantDevice(device string) string {
	if device == "cpu" {
		return "cpu"
	}
	return "cuda:0"
}

// checkInfo checks the batch's description against the pipeline's
// promises: shape [n, *SampleShape], dtype, device, and push order.
func checkInfo(t *testing.T, b *pipeline.Batch, run torchRun, id, n int) {
	t.Helper()
	info := b.Info()
	want := []int64{int64(n)}
	for _, e := range torchSampleShape {
		want = append(want, int64(e))
	}
	if pyShape(info.Shape) != pyShape(want) || b.Len() != n || info.Dtype != run.dtype ||
		info.Device != wantDevice(run.device) || info.ID != int64(id) || info.Ptr == 0 {
		t.Fatalf("batch %d: Info() = %+v, Len() = %d; want shape %v, %s on %s, ID %d", id, info, b.Len(), want, run.dtype, wantDevice(run.device), id)
	}
}

// takeBatch exports b for the consumer's stream and has the consumer take
// it with torch.from_dlpack and check it.
func takeBatch(t *testing.T, in *pyembed.Interpreter, b *pipeline.Batch, run torchRun) {
	t.Helper()
	v, err := in.Eval("c.handle()")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.DLPack(stream, run.format)
	if err != nil {
		t.Fatalf("DLPack(%d, %s): %v", stream, run.format, err)
	}
	if err := in.SetCapsule("_pt_cap", m.Ptr(), m.Format().CapsuleName()); err != nil {
		m.Delete()
		t.Fatal(err)
	}
	info := b.Info()
	err = in.Exec(fmt.Sprintf("try:\n    c.take(_pt_cap, %s, %d, %s, %s, %s)\nfinally:\n    del _pt_cap",
		pyStr(m.Format().CapsuleName()), info.Ptr, pyShape(info.Shape), pyStr(run.dtype.String()), pyStr(samplesJSON(t, b.Samples()))))
	if err != nil {
		// A capsule torch never took is still the producer's to end; one
		// it took was ended by its deleter when take raised, and then
		// Delete does nothing.
		m.Delete()
		t.Fatalf("batch %d: %v", info.ID, err)
	}
}

// waitSlots waits until every batch slot is back in the pipeline (a CUDA
// export returns its slot from a goroutine after the deleter ran) and
// returns the stats then; it fails the test if that takes over a minute.
func waitSlots(t *testing.T, p *pipeline.Pipeline) pipeline.Stats {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := p.Stats()
		if st.SlotsInUse == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batch slots still in use a minute after every batch and tensor was released", st.SlotsInUse)
		}
		time.Sleep(time.Millisecond)
	}
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
