package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// lateMatchLZ4 returns a 128-byte chunk and a numcodecs LZ4 encoding of it
// that every LZ4 decoder accepts but that breaks the format's end-of-block
// rule (its last match ends at the last byte, followed by an empty literal
// run): nvcomp.LZ4GPUCheck, and so the GPU check, refuses it.
func lateMatchLZ4(r *rand.Rand) (data, stored []byte) {
	data = make([]byte, 128)
	for i := range 100 {
		data[i] = byte(r.Uint32())
	}
	for i := 100; i < 128; i++ {
		data[i] = data[i-10]
	}
	block := []byte{0xFF, 100 - 15}
	block = append(block, data[:100]...)
	block = append(block, 10, 0, 28-4-15, 0x00)
	stored = binary.LittleEndian.AppendUint32(nil, 128)
	return data, append(stored, block...)
}

// lz4RedoStore writes a 32x32 uint16 array of 8x8 chunks (128 bytes)
// whose every chunk is a lateMatchLZ4 block; it returns the path and the
// array's bytes.
func lz4RedoStore(t *testing.T) (string, []byte) {
	t.Helper()
	path := writeCase(t, t.TempDir(), storeCase{name: "late", spec: writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.LZ4}}}, 1)
	r := rand.New(rand.NewPCG(5, 6))
	want := make([]byte, 32*32*2)
	n := 0
	err := filepath.WalkDir(filepath.Join(path, "c"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var i, j int
		rel, _ := filepath.Rel(filepath.Join(path, "c"), p)
		if _, err := fmt.Sscanf(rel, "%d/%d", &i, &j); err != nil {
			return err
		}
		data, stored := lateMatchLZ4(r)
		for row := range 8 {
			copy(want[((i*8+row)*32+j*8)*2:], data[row*16:(row+1)*16])
		}
		n++
		return os.WriteFile(p, stored, 0o644)
	})
	if err != nil || n != 16 {
		t.Fatalf("rewrote %d chunks: %v", n, err)
	}
	return path, want
}

// rewriteChunks applies f to every chunk file of the array at path.
func rewriteChunks(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(path, "c"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		return os.WriteFile(p, f(b), 0o644)
	})
	if err != nil || n == 0 {
		t.Fatalf("%s: rewrote %d chunks: %v", path, n, err)
	}
}

// TestLZ4LateMatchStore checks the premise of TestCUDAEngineRedo on the
// CPU: the CPU reader decodes the rewritten chunks to their data, and the
// GPU check's host twin refuses them.
func TestLZ4LateMatchStore(t *testing.T) {
	path, want := lz4RedoStore(t)
	a, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := a.ReadRegion([]zarr.Range{{Start: 0, Stop: 32}, {Start: 0, Stop: 32}})
	if err != nil {
		t.Fatal(err)
	}
	if string(reg.Data) != string(want) {
		t.Fatal("the CPU reader does not decode the late-match blocks to their data")
	}
	_, stored := lateMatchLZ4(rand.New(rand.NewPCG(1, 1)))
	if err := nvcomp.LZ4GPUCheck(stored[4:], 128); err == nil {
		t.Fatal("LZ4GPUCheck accepts a block whose last match ends at the last byte")
	}
}

// TestCUDAEngineRedo checks the CUDA engine's second chance for chunks
// nvCOMP does not decode: LZ4 blocks that the GPU check refuses but the CPU
// decodes give the same batches as the host engine (and are counted as
// decoded again), and damaged LZ4 chunks that no decoder takes fail their
// batch with ErrDecode naming the chunk, on both engines.
func TestCUDAEngineRedo(t *testing.T) {
	cudatest.MustHaveGPU(t)
	path, _ := lz4RedoStore(t)
	var samples []Sample
	r := rand.New(rand.NewPCG(7, 8))
	for range 40 {
		y, x := int64(r.IntN(20)), int64(r.IntN(20))
		samples = append(samples, Sample{URI: path, Box: []Range{{Start: y, Stop: y + 12}, {Start: x, Stop: x + 12}}})
	}
	cfg := Config{BatchSize: 4, SampleShape: []int{12, 12}, HostBufferBytes: 16 << 20, DeviceBufferBytes: 4 << 20, MaxChunkBytes: 1 << 20}
	st := runBoth(t, cfg, samples, true)
	t.Logf("%s: %d chunks decoded, %d by nvCOMP, %d decoded again on the CPU", st.Decoder, st.ChunksDecoded, st.ChunksGPU, st.ChunksRedecoded)
	if st.Decoder != "cpu" && st.ChunksRedecoded == 0 {
		t.Error("no chunk was decoded again: the late-match blocks never reached nvCOMP")
	}

	// Truncate every chunk's block: no decoder takes it.
	rewriteChunks(t, path, func(b []byte) []byte { return b[:len(b)-20] })
	for _, dev := range []string{"cpu", "cuda"} {
		c := cfg
		c.Device = dev
		p := newChecked(t, c)
		if err := p.Push(samples[:4]...); err != nil {
			t.Fatal(err)
		}
		_, err := p.Pop(context.Background())
		var pe *Error
		if !errors.Is(err, ErrDecode) || !errors.As(err, &pe) || pe.URI != path {
			t.Fatalf("%s: Pop of truncated LZ4 chunks: %v; want ErrDecode naming %s", dev, err, path)
		}
		t.Logf("%s: %v", dev, err)
	}
}
