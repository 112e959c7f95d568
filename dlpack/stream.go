package dlpack

import "fmt"

// Values of the stream argument of __dlpack__ for CUDA tensors (the
// Python array API standard and DLPack's Python specification):
//
//	None  the legacy default stream; pass StreamLegacy
//	1     the legacy default stream, CU_STREAM_LEGACY
//	2     the per-thread default stream, CU_STREAM_PER_THREAD
//	> 2   a CUstream handle (PyTorch: torch.cuda.current_stream().cuda_stream)
//	-1    the consumer wants no synchronization
//	0     disallowed: ambiguous between the two default streams
//
// torch.from_dlpack passes 1 when its current stream is the legacy default
// stream and the raw handle otherwise. Handles 1 and 2 are the values of
// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD themselves, so every value
// above 0 is a CUstream the driver accepts as is.
const (
	StreamLegacy    int64 = 1
	StreamPerThread int64 = 2
	StreamNoSync    int64 = -1
)

// Waiter is the producer's side of the stream handshake, implemented over
// the CUDA binding by whoever owns the producing stream (the pipeline).
type Waiter interface {
	// WaitStream makes the CUDA stream s wait, on the device, for all
	// work the producer has queued so far on its own stream, without
	// blocking the host: cuEventRecord(ev, producer) then
	// cuStreamWaitEvent(s, ev, 0). s is CU_STREAM_LEGACY (1),
	// CU_STREAM_PER_THREAD (2) or a stream handle, in the producer's
	// device context.
	WaitStream(s uintptr) error
	// WaitHost blocks until the producer's queued work is done
	// (cuEventSynchronize), for a consumer that reads on the host.
	WaitHost() error
}

// Synchronize does the producer's half of the __dlpack__ stream handshake
// for a tensor on dev that stream consumer is about to use: the data must
// be ready, as seen from that stream, before the tensor is handed over.
//
// For CUDA and CUDAManaged memory it calls w.WaitStream(stream), or
// nothing for StreamNoSync; 0 and values below -1 are ErrStream. For CPU
// and CUDAHost memory, which the consumer reads on the host, it calls
// w.WaitHost unless stream is StreamNoSync. Pass StreamLegacy where the
// consumer passed None.
//
// After the consumer's deleter has run, the owner must still order reuse
// of device memory after the consumer's stream: see Owner.
func Synchronize(dev Device, stream int64, w Waiter) error {
	switch dev.Type {
	case CUDA, CUDAManaged:
		switch {
		case stream == StreamNoSync:
			return nil
		case stream > 0:
			if err := w.WaitStream(uintptr(stream)); err != nil {
				return fmt.Errorf("dlpack: order stream %#x after the producer: %w", stream, err)
			}
			return nil
		}
		return fmt.Errorf("%w: %d for a %s tensor (want -1, 1, 2 or a stream handle)", ErrStream, stream, dev)
	case CPU, CUDAHost:
		if stream == StreamNoSync {
			return nil
		}
		if err := w.WaitHost(); err != nil {
			return fmt.Errorf("dlpack: wait for the producer of a %s tensor: %w", dev, err)
		}
		return nil
	}
	return fmt.Errorf("%w: device type %s", ErrStream, dev.Type)
}
