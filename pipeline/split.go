package pipeline

import (
	"sync"
	"time"
)

// decodeSplit steers hybrid decoding on the CUDA engine: of the chunks
// nvCOMP could decode, the fraction (by decoded bytes) that CPU workers
// take instead.
//
// The CPU share only pays while the GPU is the bottleneck: CPU workers
// that decode also take cores and memory bandwidth from the IO workers
// and the checks, and on a 16-core H100 host a share balanced by decode
// rates alone made every scenario 12-27% slower than a token share. So
// the fraction follows who waits: when a wave had to wait for a free wave
// buffer (the GPU is behind), it grows; when it did not, it shrinks. It
// never exceeds the share that would make CPU and GPU finish a wave's
// decoding together (cpu / (cpu + gpu), from smoothed rates: the CPU's
// measured as the wall time its workers spend on a wave, nvCOMP's from
// CUDA events around its launches), and the CPU always keeps a small share
// so that its rate stays measured.
type decodeSplit struct {
	mu      sync.Mutex
	frac    float64 // the current fraction; 0 until the first wave
	cpuRate float64 // bytes/s; 0 until measured
	gpuRate float64
}

const (
	splitMin   = 0.02
	splitMax   = 0.9
	splitAlpha = 0.2 // weight of the newest wave in the smoothed rates
	splitGrow  = 1.25
	splitDecay = 0.8
	// splitWait is how long a wave must wait for a wave buffer for the GPU
	// to count as the bottleneck. The share settles where about half the
	// waves wait this long, which leaves a wave's preparation (checks, the
	// CPU's share of decoding, layout: on the way to its copy) that much
	// slack behind the GPU's wave; at 1 ms the slack was too little to
	// absorb the preparation's jitter, and the decode stream idled
	// (BENCH.md, 2026-11-24 (3)).
	splitWait = 5 * time.Millisecond
)

func (d *decodeSplit) fraction() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return max(d.frac, splitMin)
}

// balance is the share that makes CPU and GPU finish together, or
// splitMax before both rates are measured. d.mu must be held.
func (d *decodeSplit) balance() float64 {
	if d.cpuRate == 0 || d.gpuRate == 0 {
		return splitMax
	}
	return min(max(d.cpuRate/(d.cpuRate+d.gpuRate), splitMin), splitMax)
}

// waited records how long a wave waited for a free wave buffer.
func (d *decodeSplit) waited(w time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := max(d.frac, splitMin)
	if w >= splitWait {
		f *= splitGrow
	} else {
		f *= splitDecay
	}
	d.frac = min(max(f, splitMin), d.balance())
}

func smooth(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return old + splitAlpha*(v-old)
}

// cpuDone records that CPU workers decoded n bytes of a wave in d.
func (d *decodeSplit) cpuDone(n int64, dur time.Duration) {
	if n < 1<<20 || dur <= 0 { // too little to time
		return
	}
	d.mu.Lock()
	d.cpuRate = smooth(d.cpuRate, float64(n)/dur.Seconds())
	d.mu.Unlock()
}

// gpuDone records that nvCOMP decoded n bytes of a wave in d.
func (d *decodeSplit) gpuDone(n int64, dur time.Duration) {
	if n < 1<<20 || dur <= 0 {
		return
	}
	d.mu.Lock()
	d.gpuRate = smooth(d.gpuRate, float64(n)/dur.Seconds())
	d.mu.Unlock()
}
