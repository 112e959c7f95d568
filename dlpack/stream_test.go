package dlpack

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// recordWaiter records the calls Synchronize makes.
type recordWaiter struct {
	calls []string
	err   error
}

func (w *recordWaiter) WaitStream(s uintptr) error {
	w.calls = append(w.calls, fmt.Sprintf("stream %#x", s))
	return w.err
}

func (w *recordWaiter) WaitHost() error {
	w.calls = append(w.calls, "host")
	return w.err
}

var syncTests = []struct {
	dev    Device
	stream int64
	calls  []string
	err    error
}{
	{Device{Type: CUDA}, StreamLegacy, []string{"stream 0x1"}, nil},
	{Device{Type: CUDA, ID: 1}, StreamPerThread, []string{"stream 0x2"}, nil},
	{Device{Type: CUDA}, 0x7f3a5c001230, []string{"stream 0x7f3a5c001230"}, nil},
	{Device{Type: CUDAManaged}, 0x55e1d0, []string{"stream 0x55e1d0"}, nil},
	{Device{Type: CUDA}, StreamNoSync, nil, nil},
	{Device{Type: CUDA}, 0, nil, ErrStream},
	{Device{Type: CUDA}, -2, nil, ErrStream},
	{Device{Type: CPU}, StreamLegacy, []string{"host"}, nil},
	{Device{Type: CUDAHost}, StreamLegacy, []string{"host"}, nil},
	{Device{Type: CPU}, StreamNoSync, nil, nil},
	{Device{Type: Metal}, StreamLegacy, nil, ErrStream},
}

func TestSynchronize(t *testing.T) {
	for _, tt := range syncTests {
		var w recordWaiter
		err := Synchronize(tt.dev, tt.stream, &w)
		if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) || !slices.Equal(w.calls, tt.calls) {
			t.Errorf("Synchronize(%v, %d) = %v, calls %q; want %v, %q", tt.dev, tt.stream, err, w.calls, tt.err, tt.calls)
		}
	}
}

func TestSynchronizeError(t *testing.T) {
	cause := errors.New("cuda: cuStreamWaitEvent: CUDA_ERROR_INVALID_HANDLE")
	for _, dev := range []Device{{Type: CUDA}, {Type: CUDAHost}} {
		w := recordWaiter{err: cause}
		if err := Synchronize(dev, 0x1234, &w); !errors.Is(err, cause) {
			t.Errorf("Synchronize(%v) with a failing waiter = %v; want it to wrap %v", dev, err, cause)
		}
	}
}
