package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// TestHostEngineTestdata streams boxes of every array and OME-NGFF level
// of ../testdata (written by zarr-python and tensorstore) through the host
// engine, in float32 and bfloat16, and compares every sample with the
// expected .npy values converted to the output type: a box around the
// whole array, boxes reaching past either end of every axis, one wholly
// outside (all fill) and random ones, in batches of 3 with a ragged last
// batch. The store damacy must refuse is refused at Push.
func TestHostEngineTestdata(t *testing.T) {
	rng := newTestRand(t)
	for _, e := range zarrtest.ReadTestdata(t, fixtureDir) {
		t.Run(e.Name, func(t *testing.T) {
			uri, level := filepath.Join(fixtureDir, e.Path), 0
			if e.NGFFLevel != nil {
				level = *e.NGFFLevel
			}
			if e.Error != "" {
				checkRefused(t, uri, e)
				return
			}
			want, err := zarrtest.ReadNPY(filepath.Join(fixtureDir, e.NPY))
			if err != nil {
				t.Fatal(err)
			}
			src, ok := testdataDtype(e.DType)
			if !ok {
				t.Fatalf("data type %q", e.DType)
			}
			boxes := testdataPipelineBoxes(rng, want.Shape)
			for _, out := range []Dtype{F32, BF16} {
				ext := make([]int, len(want.Shape))
				for k, n := range want.Shape {
					ext[k] = int(n) + 2
				}
				cfg := Config{BatchSize: 3, SampleShape: ext, Dtype: out, Device: "cpu", HostBufferBytes: 1 << 20,
					DeviceBufferBytes: 1 << 20, MaxChunkBytes: 256 << 10, ComputeThreads: 2, IOThreads: 2,
					Logger: slog.New(slog.DiscardHandler)}
				p, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				var samples []Sample
				for _, box := range boxes {
					s := Sample{URI: uri, Level: level}
					for _, r := range box {
						s.Box = append(s.Box, Range{Start: r[0], Stop: r[1]})
					}
					samples = append(samples, s)
				}
				if err := p.Push(samples...); err != nil {
					p.Close()
					t.Fatalf("%s (%s): Push: %v", e.Exercises, e.Writer, err)
				}
				if err := p.Flush(); err != nil {
					t.Fatal(err)
				}
				for at := 0; at < len(boxes); {
					b, err := p.Pop(context.Background())
					if err != nil {
						p.Close()
						t.Fatalf("%s (%s): Pop after %d samples: %v", e.Exercises, e.Writer, at, err)
					}
					per := len(b.Bytes()) / b.Len()
					for i, s := range b.Samples() {
						exp := convertTestdata(src, want.Box(e.Fill(), boxes[at+i]), out)
						if have := b.Bytes()[i*per : (i+1)*per]; string(have) != string(exp) {
							t.Errorf("%s (%s), %s out: sample %s: %s", e.Exercises, e.Writer, out, s, firstDiff(have, exp, out.Size()))
						}
					}
					at += b.Len()
					b.Release()
				}
				if err := p.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
		})
	}
}

// checkRefused checks that a pipeline refuses a store outside the formats
// damacy reads, at Push or at the Pop of its batch, with an ErrDecode or
// ErrInvalid error that says why.
func checkRefused(t *testing.T, uri string, e zarrtest.TestdataArray) {
	cfg := Config{BatchSize: 1, SampleShape: []int{2, 2}, Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20,
		MaxChunkBytes: 256 << 10}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Push(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 2}, {Start: 0, Stop: 2}}})
	if err == nil {
		var b *Batch
		if b, err = p.Pop(context.Background()); err == nil {
			b.Release()
		}
	}
	if err == nil || !(errors.Is(err, ErrDecode) || errors.Is(err, ErrInvalid)) || !strings.Contains(err.Error(), e.Error) {
		t.Errorf("%s: Push and Pop: %v; want ErrDecode or ErrInvalid saying %q", e.Exercises, err, e.Error)
	}
}

// testdataPipelineBoxes returns boxes of extent shape+2 on every axis: one
// holding the whole array with one element of fill around it, one reaching
// 3 before the start, one reaching 3 past the end, one wholly outside,
// and four at random places overlapping the array.
func testdataPipelineBoxes(rng *rand.Rand, shape []int64) [][][2]int64 {
	starts := [][]int64{}
	for _, s := range []func(n int64) int64{
		func(int64) int64 { return -1 },
		func(int64) int64 { return -3 },
		func(int64) int64 { return 1 },
		func(n int64) int64 { return n + 1 },
	} {
		var st []int64
		for _, n := range shape {
			st = append(st, s(n))
		}
		starts = append(starts, st)
	}
	for range 4 {
		var st []int64
		for _, n := range shape {
			st = append(st, rng.Int64N(2*n+1)-n-1) // from -(n+1) to n-1: the box overlaps the array
		}
		starts = append(starts, st)
	}
	var boxes [][][2]int64
	for _, st := range starts {
		box := make([][2]int64, len(shape))
		for k, n := range shape {
			box[k] = [2]int64{st[k], st[k] + n + 2}
		}
		boxes = append(boxes, box)
	}
	return boxes
}

// testdataDtype maps a zarr data type name to the kernels' type.
func testdataDtype(name string) (ptx.Dtype, bool) {
	for _, dt := range []zarr.DataType{zarr.Bool, zarr.Int8, zarr.Int16, zarr.Int32, zarr.Int64, zarr.Uint8,
		zarr.Uint16, zarr.Uint32, zarr.Uint64, zarr.Float16, zarr.Float32, zarr.Float64} {
		if dt.String() == name {
			return plan.Dtype(dt)
		}
	}
	return 0, false
}

// convertTestdata converts little-endian elements of src to the output
// type, as DESIGN.md defines the conversion (ptx.Float32Bits, then
// bfloat16 rounded to nearest even).
func convertTestdata(src ptx.Dtype, data []byte, out Dtype) []byte {
	size := src.Size()
	n := len(data) / size
	b := make([]byte, n*out.Size())
	for i := range n {
		var e [8]byte
		copy(e[:], data[i*size:(i+1)*size])
		f := ptx.Float32Bits(src, binary.LittleEndian.Uint64(e[:]))
		if out == BF16 {
			binary.LittleEndian.PutUint16(b[2*i:], ptx.BFloat16Bits(f))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], f)
		}
	}
	return b
}
