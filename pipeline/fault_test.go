package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
	"github.com/damacy-go/damacy/zarr/writer"
)

// The fault tests: three images with their labels (imageWithLabel), nine
// samples of them in batches of two, and one fault in image "b" per case.
// Under OnErrorRaise each batch holding a sample the fault spoils fails
// its Pop with the documented error, naming the first such sample, and
// every other batch comes out right; under OnErrorSkip every batch comes
// out, every good sample exactly once and right, and every spoilt one is
// reported once. Nothing hangs, no slot or goroutine is left (newChecked).

// faultCase is one fault: what it does to image b (the directory holding
// the three images, and b's path), the kind of its error, the source and
// store key the error names, and which of b's samples it spoils.
type faultCase struct {
	name   string
	damage func(t *testing.T, dir, b string)
	kind   error
	source string
	chunk  string // the store key the error names, below the URI ("" for none)
	spoils func(t *testing.T, s Sample) bool
	remote bool // read the images through a server that answers 500 for the damaged object
}

// faultBoxes are the boxes (c, z, y, x) read of each image: the first
// touches the first chunk of the image and the first shard of its label,
// the others do not.
var faultBoxes = [][]Range{
	{{Start: 0, Stop: 2}, {Start: 0, Stop: 8}, {Start: 0, Stop: 16}, {Start: 0, Stop: 16}},
	{{Start: 0, Stop: 2}, {Start: 8, Stop: 16}, {Start: 16, Stop: 32}, {Start: 16, Stop: 32}},
	{{Start: 0, Stop: 2}, {Start: 12, Stop: 20}, {Start: 20, Stop: 36}, {Start: 24, Stop: 40}},
}

func firstBox(_ *testing.T, s Sample) bool { return s.Box[1].Start == 0 }

func flipFirstBytes(t *testing.T, name string) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // the zstd frame's magic
		data[i] ^= 0x5a
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

var faultCases = []faultCase{
	{
		name: "missing label",
		damage: func(t *testing.T, _, b string) {
			if err := os.RemoveAll(filepath.Join(b, "labels", "cells")); err != nil {
				t.Fatal(err)
			}
		},
		kind: ErrNotFound, source: "label",
		spoils: func(*testing.T, Sample) bool { return true },
	},
	{
		name:   "flipped bytes",
		damage: func(t *testing.T, _, b string) { flipFirstBytes(t, filepath.Join(b, "0", "c", "0", "0", "0", "0")) },
		kind:   ErrDecode, source: "image", chunk: "0/c/0/0/0/0",
		spoils: firstBox,
	},
	{
		name: "truncated shard",
		damage: func(t *testing.T, _, b string) {
			name := filepath.Join(b, "labels", "cells", "0", "c", "0", "0", "0")
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, data[:len(data)/2], 0o644); err != nil {
				t.Fatal(err)
			}
		},
		kind: ErrDecode, source: "label",
		spoils: firstBox,
	},
	{
		name: "label out of range",
		damage: func(t *testing.T, _, b string) {
			writeLabel16(t, filepath.Join(b, "labels", "cells"))
		},
		kind: ErrDtype, source: "label",
		spoils: func(t *testing.T, s Sample) bool { return labelMax(t, s) > 255 },
	},
	{
		name:   "500 beyond the retries",
		remote: true,
		kind:   ErrStorage, source: "image", chunk: "0/c/0/0/0/0",
		spoils: firstBox,
	},
}

// writeLabel16 replaces the label at path with one of uint16 values, most
// of them above 255.
func writeLabel16(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	space := func(n string) writer.Axis { return writer.Axis{Name: n, Type: "space"} }
	spec := writer.Spec{DataType: zarr.Uint16, Shape: []int64{20, 36, 40}, ChunkShape: []int64{8, 8, 16},
		ShardShape: []int64{16, 16, 32}, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}
	m, err := writer.CreateNGFF(path, writer.NGFFSpec{Axes: []writer.Axis{space("z"), space("y"), space("x")}, Levels: 1, Array: spec})
	if err != nil {
		t.Fatal(err)
	}
	syn := &writer.Synth{Seed: 5, DataType: zarr.Uint16, Shape: spec.Shape, Amplitude: 0.5, NoiseBits: 3, RandomFraction: 0.3}
	if err := m.Level(0).WriteFrom(context.Background(), 2, syn.Fill); err != nil {
		t.Fatal(err)
	}
}

// labelMax is the largest label value in sample s's box.
func labelMax(t *testing.T, s Sample) uint64 {
	reg := readRef(t, filepath.Join(s.URI, "labels", "cells"), s.Box[1:])
	var most uint64
	size := reg.DataType.Size()
	for i := 0; i < len(reg.Data); i += size {
		var e [8]byte
		copy(e[:], reg.Data[i:i+size])
		most = max(most, binary.LittleEndian.Uint64(e[:]))
	}
	return most
}

// readRef reads box of the OME-NGFF image at path (level 0) with the
// reference reader.
func readRef(t *testing.T, path string, box []Range) *zarr.Region {
	t.Helper()
	ms, err := zarr.OpenNGFF(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ms.Level(0)
	if err != nil {
		t.Fatal(err)
	}
	return regionOf(t, a, box)
}

// wantLabel is the uint8 output of a label region whose values fit.
func wantLabel(reg *zarr.Region) []byte {
	size := reg.DataType.Size()
	out := make([]byte, 0, len(reg.Data)/size)
	for i := 0; i < len(reg.Data); i += size {
		out = append(out, reg.Data[i])
	}
	return out
}

func TestFaultsHost(t *testing.T) { testFaults(t, "cpu") }

// TestFaultsCUDA runs the fault cases on the CUDA engine.
func TestFaultsCUDA(t *testing.T) {
	cudatest.MustHaveGPU(t)
	testFaults(t, "cuda")
}

func testFaults(t *testing.T, device string) {
	for _, fc := range faultCases {
		for _, policy := range []ErrorPolicy{OnErrorRaise, OnErrorSkip} {
			t.Run(fc.name+"/"+policy.String(), func(t *testing.T) {
				dir := t.TempDir()
				for i, name := range []string{"a", "b", "c"} {
					imageWithLabel(t, filepath.Join(dir, name), uint64(i+1))
				}
				b := filepath.Join(dir, "b", "img.zarr")
				if fc.damage != nil {
					fc.damage(t, dir, b)
				}
				cfg := Config{BatchSize: 2, Device: device, OnError: policy, SampleShape: []int{2, 8, 16, 16},
					HostBufferBytes: 8 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 64 << 10, ComputeThreads: 2, IOThreads: 2,
					Sources: []Source{{Name: "image"}, {Name: "label", Label: "cells", Dtype: U8}}}
				base := dir
				var srv *remotetest.FaultServer
				if fc.remote {
					srv = remotetest.NewFaultServer(t, dir, false)
					srv.Inject(remotetest.Fault{Kind: remotetest.Status500, Method: "GET", Path: "b/img.zarr/0/c/0/0/0/0"})
					cfg.Remote = remote.Options{HTTPClient: srv.Client(), Attempts: 2, Backoff: time.Millisecond, Timeout: 10 * time.Second}
					base = srv.URL
				}
				var samples []Sample
				var spoilt []bool
				for _, box := range faultBoxes {
					for _, name := range []string{"a", "b", "c"} {
						s := Sample{URI: filepath.Join(dir, name, "img.zarr"), Box: box}
						spoilt = append(spoilt, name == "b" && fc.spoils(t, s))
						samples = append(samples, s)
					}
				}
				if !slices.Contains(spoilt, true) {
					t.Fatal("the fault spoils no sample")
				}
				remoteSamples := samples
				if fc.remote {
					remoteSamples = rebase(samples, dir, base)
				}
				p := newChecked(t, cfg)
				if srv != nil { // before newChecked's check: no connection goroutines left
					t.Cleanup(func() { srv.Client().CloseIdleConnections(); srv.CloseClientConnections() })
				}
				pushAll(t, p, remoteSamples...)
				runFaults(t, p, fc, policy, samples, remoteSamples, spoilt)
			})
		}
	}
}

// runFaults pops every batch of samples (read as pushed) and checks it
// against the reference reader's reads of local (the same samples, read
// locally), and the errors against fc.
func runFaults(t *testing.T, p *Pipeline, fc faultCase, policy ErrorPolicy, local, pushed []Sample, spoilt []bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := map[int64]bool{}
	bs := p.cfg.BatchSize
	for first := 0; first < len(local); first += bs {
		batch := make([]int, 0, bs)
		for i := first; i < min(first+bs, len(local)); i++ {
			batch = append(batch, i)
		}
		bad := slices.IndexFunc(batch, func(i int) bool { return spoilt[i] })
		b, err := p.Pop(ctx)
		if policy == OnErrorRaise && bad >= 0 {
			checkFault(t, "Pop", err, fc, pushed[batch[bad]], int64(batch[bad]+1))
			continue
		}
		if err != nil {
			t.Fatalf("batch of samples %v: %v", batch, err)
		}
		for _, e := range b.Skipped() {
			i := int(e.Position - 1)
			if i < first || i >= first+bs || !spoilt[i] || seen[e.Position] {
				t.Errorf("batch of samples %v skipped sample %d (%v)", batch, i, e)
				continue
			}
			seen[e.Position] = true
			checkFault(t, "Skipped", e, fc, pushed[i], e.Position)
		}
		img, lab := b.Tensor("image").Bytes(), b.Tensor("label").Bytes()
		if b.Len() > 0 && img == nil { // CUDA engine
			img = make([]byte, b.Len()*int(b.Tensor("image").slot.bytes(1)))
			lab = make([]byte, b.Len()*int(b.Tensor("label").slot.bytes(1)))
			if err := b.Tensor("image").CopyToHost(img); err != nil {
				t.Fatal(err)
			}
			if err := b.Tensor("label").CopyToHost(lab); err != nil {
				t.Fatal(err)
			}
		}
		for k, pos := range b.Positions() {
			i := int(pos - 1)
			if i < first || i >= first+bs || spoilt[i] || seen[pos] {
				t.Fatalf("batch of samples %v delivered sample %d", batch, i)
			}
			seen[pos] = true
			s := local[i]
			wi, wl := expected(readRef(t, s.URI, s.Box), F32), wantLabel(readRef(t, filepath.Join(s.URI, "labels", "cells"), s.Box[1:]))
			if string(img[k*len(wi):(k+1)*len(wi)]) != string(wi) {
				t.Errorf("image of sample %d (%s) differs", i, s)
			}
			if string(lab[k*len(wl):(k+1)*len(wl)]) != string(wl) {
				t.Errorf("label of sample %d (%s) differs", i, s)
			}
		}
		b.Release()
	}
	st := p.Stats()
	nbad := 0
	for i, sp := range spoilt {
		switch {
		case sp:
			nbad++
		case !seen[int64(i+1)] && (policy == OnErrorSkip || !batchSpoilt(spoilt, i, bs)):
			t.Errorf("sample %d never came out", i)
		}
	}
	if policy == OnErrorSkip && (len(seen) != len(local) || st.SamplesSkipped != int64(nbad) || st.SamplesEmitted != int64(len(local)-nbad)) {
		t.Errorf("%d samples seen of %d; Stats: %d emitted, %d skipped; want %d skipped", len(seen), len(local), st.SamplesEmitted, st.SamplesSkipped, nbad)
	}
	if st.SamplesInFlight != 0 {
		t.Errorf("%d samples still in flight", st.SamplesInFlight)
	}
}

// batchSpoilt reports whether sample i's batch holds a spoilt sample.
func batchSpoilt(spoilt []bool, i, bs int) bool {
	first := i / bs * bs
	return slices.Contains(spoilt[first:min(first+bs, len(spoilt))], true)
}

// checkFault checks an error against its case: its kind, the sample's
// position, URI and source, the chunk, and that the message names them.
func checkFault(t *testing.T, where string, err error, fc faultCase, s Sample, pos int64) {
	t.Helper()
	var e *Error
	if !errors.Is(err, fc.kind) || !errors.As(err, &e) {
		t.Errorf("%s: %v, want %v", where, err, fc.kind)
		return
	}
	if e.Position != pos || e.Source != fc.source || !strings.HasPrefix(e.URI, s.URI) || e.Chunk != fc.chunk && fc.chunk != "" {
		t.Errorf("%s: %v: position %d, source %q, URI %s, chunk %q; want %d, %q, %s, %q", where, err, e.Position, e.Source, e.URI, e.Chunk, pos, fc.source, s.URI, fc.chunk)
	}
	msg := err.Error()
	for _, want := range []string{s.URI, fmt.Sprintf("(sample %d: ", pos), `source "` + fc.source + `"`, fc.chunk} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not name %q", where, msg, want)
		}
	}
	t.Log(where, ": ", msg)
}
