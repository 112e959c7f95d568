package cuda

import (
	"strconv"
	"time"
)

// Stream is a CUstream: a queue of GPU work that runs in order. Streams
// are process-wide handles; creating one needs a current context.
//
// The zero Stream is the NULL stream, which the driver treats as the
// legacy default stream; StreamLegacy and StreamPerThread name the two
// special handles explicitly (DLPack consumers pass them). The pipeline
// uses its own non-blocking streams.
type Stream uintptr

// Special stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
const (
	StreamLegacy    Stream = 1 // the legacy default stream, which synchronises with blocking streams
	StreamPerThread Stream = 2 // the calling thread's per-thread default stream
)

// StreamFlags are the flags of NewStream (CUstream_flags).
type StreamFlags uint32

// Stream flags.
const (
	StreamDefault     StreamFlags = 0 // CU_STREAM_DEFAULT: synchronises with the legacy default stream
	StreamNonBlocking StreamFlags = 1 // CU_STREAM_NON_BLOCKING: no implicit synchronisation with stream 0
)

// NewStream creates a stream in the current context. It wraps
// cuStreamCreate.
func NewStream(flags StreamFlags) (Stream, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var s Stream
	if err := check("cuStreamCreate", d.cuStreamCreate(&s, flags)); err != nil {
		return 0, err
	}
	return s, nil
}

// NewStreamWithPriority creates a stream with a scheduling priority;
// lower numbers are higher priorities, within StreamPriorityRange (the
// driver clamps values outside it). It wraps cuStreamCreateWithPriority.
func NewStreamWithPriority(flags StreamFlags, priority int) (Stream, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var s Stream
	if err := checkArg("cuStreamCreateWithPriority", "priority "+strconv.Itoa(priority), d.cuStreamCreateWithPriority(&s, flags, int32(priority))); err != nil {
		return 0, err
	}
	return s, nil
}

// Destroy destroys the stream and zeroes *s; work already queued still
// completes. Destroying a zero Stream does nothing, so Destroy is safe to
// repeat. It wraps cuStreamDestroy_v2.
func (s *Stream) Destroy() error {
	if *s == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if err := check("cuStreamDestroy_v2", d.cuStreamDestroy_v2(*s)); err != nil {
		return err
	}
	*s = 0
	return nil
}

// Query reports whether all work queued on the stream has completed. Work
// still running is done == false with a nil error; an error is a real
// failure (possibly of earlier asynchronous work). It wraps cuStreamQuery.
func (s Stream) Query() (done bool, err error) {
	d, err := api()
	if err != nil {
		return false, err
	}
	switch r := d.cuStreamQuery(s); r {
	case CUDA_SUCCESS:
		return true, nil
	case CUDA_ERROR_NOT_READY:
		return false, nil
	default:
		return false, &Error{Op: "cuStreamQuery", Code: r}
	}
}

// Synchronize blocks until all work queued on the stream has completed.
// It wraps cuStreamSynchronize.
func (s Stream) Synchronize() error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuStreamSynchronize", d.cuStreamSynchronize(s))
}

// WaitEvent makes all work queued on the stream after this call wait for
// the work captured by e's latest Record; the host does not wait. It wraps
// cuStreamWaitEvent.
func (s Stream) WaitEvent(e Event) error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuStreamWaitEvent", d.cuStreamWaitEvent(s, e, 0))
}

// Event is a CUevent: a marker recorded into a stream, completed when the
// stream reaches it. Creating one needs a current context.
type Event uintptr

// EventFlags are the flags of NewEvent (CUevent_flags).
type EventFlags uint32

// Event flags.
const (
	EventDefault       EventFlags = 0 // CU_EVENT_DEFAULT
	EventBlockingSync  EventFlags = 1 // CU_EVENT_BLOCKING_SYNC: Synchronize sleeps instead of spinning
	EventDisableTiming EventFlags = 2 // CU_EVENT_DISABLE_TIMING: cheaper; no EventElapsedTime
	EventInterprocess  EventFlags = 4 // CU_EVENT_INTERPROCESS: shareable by IPC; needs EventDisableTiming
)

// NewEvent creates an event in the current context. For pure ordering
// (Stream.WaitEvent, completion checks) pass EventDisableTiming. It wraps
// cuEventCreate.
func NewEvent(flags EventFlags) (Event, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var e Event
	if err := check("cuEventCreate", d.cuEventCreate(&e, flags)); err != nil {
		return 0, err
	}
	return e, nil
}

// Record captures the work queued on s so far; the event completes when
// that work has. Recording again replaces the captured work. It wraps
// cuEventRecord.
func (e Event) Record(s Stream) error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuEventRecord", d.cuEventRecord(e, s))
}

// Query reports whether the work captured by the latest Record has
// completed (true for an event never recorded). Work still running is
// done == false with a nil error. It wraps cuEventQuery.
func (e Event) Query() (done bool, err error) {
	d, err := api()
	if err != nil {
		return false, err
	}
	switch r := d.cuEventQuery(e); r {
	case CUDA_SUCCESS:
		return true, nil
	case CUDA_ERROR_NOT_READY:
		return false, nil
	default:
		return false, &Error{Op: "cuEventQuery", Code: r}
	}
}

// Synchronize blocks until the work captured by the latest Record has
// completed. It wraps cuEventSynchronize.
func (e Event) Synchronize() error {
	d, err := api()
	if err != nil {
		return err
	}
	return check("cuEventSynchronize", d.cuEventSynchronize(e))
}

// Destroy destroys the event and zeroes *e; safe to repeat. It wraps
// cuEventDestroy_v2.
func (e *Event) Destroy() error {
	if *e == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if err := check("cuEventDestroy_v2", d.cuEventDestroy_v2(*e)); err != nil {
		return err
	}
	*e = 0
	return nil
}

// EventElapsedTime returns the GPU time between two completed events
// (resolution about half a microsecond). Both must have been created
// without EventDisableTiming; if either has not completed the error
// matches ErrNotReady. It wraps cuEventElapsedTime_v2, which cuda.h 13.0
// selects, or cuEventElapsedTime on drivers that lack it.
func EventElapsedTime(start, end Event) (time.Duration, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var ms float32
	if d.cuEventElapsedTime_v2 != nil {
		err = check("cuEventElapsedTime_v2", d.cuEventElapsedTime_v2(&ms, start, end))
	} else {
		err = check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, start, end))
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
