package pipeline

import (
	"math"
	"testing"
	"time"
)

func TestDecodeSplit(t *testing.T) {
	var d decodeSplit
	if f := d.fraction(); f != splitMin {
		t.Fatalf("fraction before any wave = %v, want %v", f, splitMin)
	}
	// Waves that wait for the GPU raise the share, up to the balance of
	// the rates: CPU at 10 GB/s, GPU at 30 GB/s gives a quarter.
	for range 50 {
		d.cpuDone(10<<20, time.Duration(float64(10<<20)/10e9*1e9))
		d.gpuDone(30<<20, time.Duration(float64(30<<20)/30e9*1e9))
		d.waited(2 * splitWait)
	}
	if f := d.fraction(); math.Abs(f-0.25) > 0.01 {
		t.Fatalf("fraction while GPU-bound = %v, want 0.25", f)
	}
	// Waves that find a free buffer at once (the GPU waits for the host)
	// shrink it back to the minimum.
	for range 50 {
		d.waited(0)
	}
	if f := d.fraction(); f != splitMin {
		t.Fatalf("fraction while host-bound = %v, want %v", f, splitMin)
	}
	// A slow CPU keeps a minimal share even while GPU-bound; tiny samples
	// are ignored.
	for range 200 {
		d.cpuDone(2<<20, time.Second)
		d.gpuDone(1, time.Nanosecond)
		d.waited(time.Second)
	}
	if f := d.fraction(); f != splitMin {
		t.Fatalf("fraction with a very slow CPU = %v, want %v", f, splitMin)
	}
}
