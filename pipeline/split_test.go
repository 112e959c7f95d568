package pipeline

import (
	"math"
	"testing"
	"time"
)

func TestDecodeSplit(t *testing.T) {
	var d decodeSplit
	if f := d.fraction(); f != splitStart {
		t.Fatalf("fraction before any measurement = %v, want %v", f, splitStart)
	}
	// CPU at 10 GB/s, GPU at 30 GB/s: the CPU should take a quarter.
	for range 50 {
		d.cpuDone(10<<20, time.Duration(float64(10<<20)/10e9*1e9))
		d.gpuDone(30<<20, time.Duration(float64(30<<20)/30e9*1e9))
	}
	if f := d.fraction(); math.Abs(f-0.25) > 0.01 {
		t.Fatalf("fraction = %v, want 0.25", f)
	}
	// A slow CPU keeps a minimal share; tiny samples are ignored.
	for range 200 {
		d.cpuDone(2<<20, time.Second)
		d.gpuDone(1, time.Nanosecond)
	}
	if f := d.fraction(); f != splitMin {
		t.Fatalf("fraction with a very slow CPU = %v, want %v", f, splitMin)
	}
}
