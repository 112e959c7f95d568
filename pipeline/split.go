package pipeline

import (
	"sync"
	"time"
)

// decodeSplit steers hybrid decoding on the CUDA engine: of the chunks
// nvCOMP could decode, the fraction (by decoded bytes) that CPU workers
// take instead, so that both finish a wave's share at the same time. It
// keeps smoothed rates of both sides (decoded bytes per second: the CPU's
// measured as the wall time its workers spend on a wave, nvCOMP's from
// CUDA events around its launches) and sets the fraction to
// cpu / (cpu + gpu). The CPU always keeps a small share, so that its rate
// stays measured.
type decodeSplit struct {
	mu       sync.Mutex
	cpuRate  float64 // bytes/s; 0 until measured
	gpuRate  float64
	disabled bool // no nvCOMP: everything is on the CPU anyway
}

const (
	splitStart = 0.25 // the CPU's share before anything is measured
	splitMin   = 0.02
	splitMax   = 0.9
	splitAlpha = 0.2 // weight of the newest wave in the smoothed rates
)

func (d *decodeSplit) fraction() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cpuRate == 0 || d.gpuRate == 0 {
		return splitStart
	}
	return min(max(d.cpuRate/(d.cpuRate+d.gpuRate), splitMin), splitMax)
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
