package pipeline

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/zarr"
)

// TestCUDASourcesAugment streams an image (bf16, intensity) and its label
// (each integer output) with flips, quarter turns and permutations through
// the CUDA engine and the host engine, and requires every tensor to be
// bit-identical; then a u8 output that uint16 values do not fit fails on
// both with ErrDtype.
func TestCUDASourcesAugment(t *testing.T) {
	cudatest.MustHaveGPU(t)
	_, err := nvcomp.Load()
	cudatest.RequireNVCOMP(t, err)
	rng := newTestRand(t)
	img := imageWithLabel(t, t.TempDir(), rng.Uint64())
	ms, _ := zarr.OpenNGFF(img)
	ia, _ := ms.Level(0)
	var samples []Sample
	for range 11 {
		samples = append(samples, Sample{URI: img, Seed: rng.Uint64(), Box: randomBox(rng, ia.Shape(), []int{2, 8, 8, 8})})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ldt := range []Dtype{U8, I32, I64} {
		aug := &Augment{Seed: rng.Uint64(), Flip: []AxisChance{{1, 0.5}, {2, 0.5}, {3, 0.5}}, Rot90: []PlaneChance{{[2]int{2, 3}, 0.7}},
			Permute: []AxesChance{{[]int{1, 2, 3}, 0.5}}, Scale: [2]float64{0.5, 2}, Offset: [2]float64{-3, 3},
			Mean: 100, Std: 30, Clip: true, ClipLow: -2, ClipHigh: 5}
		var ps []*Pipeline
		for _, dev := range []string{"cpu", "cuda"} {
			p, err := New(Config{BatchSize: 4, Device: dev, Augment: aug, Sources: []Source{
				{Name: "image", Dtype: BF16}, {Name: "label", Label: "cells", Dtype: ldt}, {Name: "raw", Dtype: F32}}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			pushAll(t, p, samples...)
			p.Flush()
			ps = append(ps, p)
		}
		for got := 0; got < len(samples); {
			hb, err := ps[0].Pop(ctx)
			if err != nil {
				t.Fatal(err)
			}
			gb, err := ps[1].Pop(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, ht := range hb.Tensors() {
				want := ht.Bytes()
				have := bytes.Repeat([]byte{0xA5}, len(want))
				if err := gb.Tensors()[i].CopyToHost(have); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(have, want) {
					t.Fatalf("%v: batch %d tensor %q: the CUDA engine's bytes differ from the host engine's", ldt, hb.Info().ID, ht.Name())
				}
			}
			got += hb.Len()
			hb.Release()
			gb.Release()
		}
	}
	for _, dev := range []string{"cpu", "cuda"} {
		p, err := New(Config{BatchSize: 1, Device: dev, Sources: []Source{{Name: "image", Dtype: U8}}})
		if err != nil {
			t.Fatal(err)
		}
		pushAll(t, p, Sample{URI: img, Box: []Range{{Start: 0, Stop: 2}, {Start: 0, Stop: 20}, {Start: 0, Stop: 36}, {Start: 0, Stop: 40}}}, Sample{URI: img, Box: []Range{{Start: 0, Stop: 2}, {Start: 100, Stop: 120}, {Start: 0, Stop: 36}, {Start: 0, Stop: 40}}})
		if _, err := p.Pop(ctx); !errors.Is(err, ErrDtype) {
			t.Errorf("%s: u8 output of uint16 values: got %v, want ErrDtype", dev, err)
		}
		// The next batch (all fill, 0) fits.
		if b, err := p.Pop(ctx); err != nil {
			t.Errorf("%s: the batch after a misfit: %v", dev, err)
		} else {
			b.Release()
		}
		p.Close()
	}
}
