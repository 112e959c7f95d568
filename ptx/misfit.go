package ptx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"structs"
)

// ErrMisfit is wrapped by every error about a source value that does not
// fit an integer output type (a *MisfitError).
var ErrMisfit = errors.New("ptx: value does not fit the output type")

// MisfitStatusSize is the size of a MisfitStatus in device memory.
const MisfitStatusSize = 32

// A MisfitStatus is what the assemble kernel reports about the elements
// that did not fit an integer output type (see IntBits), laid out exactly
// as kernels.h's struct damacy_misfits. All zeros means none: the buffer
// must be zeroed before each launch that is given one, and the kernel
// only ever adds to it. HostAssembly.Misfits reports the same status for
// the same ops, field for field.
type MisfitStatus struct {
	_ structs.HostLayout
	// Count is how many elements did not fit.
	Count uint64
	// First marks the first of them in the batch's order (by sample, then
	// by element index in the sample's C order, after any transform):
	// ^(sample<<32 | index), so that the kernel keeps the first with an
	// atomic maximum and zero means none. See Position.
	First uint64
	// Value is that element's value bits (as Float32Bits takes them) and
	// Src its source type.
	Value uint64
	Src   uint32
	_     uint32 // the kernel's lock; zero outside a launch
}

// DecodeMisfitStatus reads a MisfitStatus from the MisfitStatusSize bytes
// the assemble kernel wrote (copied to the host; host byte order).
func DecodeMisfitStatus(b []byte) (MisfitStatus, error) {
	if len(b) != MisfitStatusSize {
		return MisfitStatus{}, fmt.Errorf("ptx: misfit status of %d bytes, want %d: %w", len(b), MisfitStatusSize, ErrInvalid)
	}
	e := binary.NativeEndian
	return MisfitStatus{
		Count: e.Uint64(b[0:]),
		First: e.Uint64(b[8:]),
		Value: e.Uint64(b[16:]),
		Src:   e.Uint32(b[24:]),
	}, nil
}

// Position returns the sample and the in-sample element index of the
// first misfit, and false when there is none.
func (s *MisfitStatus) Position() (sample int, index int64, ok bool) {
	if s.First == 0 {
		return 0, 0, false
	}
	key := ^s.First
	return int(key >> 32), int64(key & 0xffffffff), true
}

// Err returns nil when no element misfit, else a *MisfitError for a batch
// of layout l.
func (s *MisfitStatus) Err(l Layout) error {
	if s.Count == 0 && s.First == 0 {
		return nil
	}
	e := &MisfitError{Count: s.Count, Sample: -1, Src: Dtype(s.Src), Value: s.Value, Out: l.Dtype}
	if sample, index, ok := s.Position(); ok {
		e.Sample = sample
		e.Index = make([]int, len(l.Shape))
		for d := len(l.Shape) - 1; d >= 0; d-- {
			e.Index[d] = int(index % int64(l.Shape[d]))
			index /= int64(l.Shape[d])
		}
	}
	return e
}

// merge adds the misfits of o to s.
func (s *MisfitStatus) merge(o *MisfitStatus) {
	s.Count += o.Count
	if o.First > s.First {
		s.First, s.Value, s.Src = o.First, o.Value, o.Src
	}
}

// note records a misfit of source type src with value bits v at element
// index of sample.
func (s *MisfitStatus) note(sample uint32, index int64, src Dtype, v uint64) {
	s.Count++
	if mark := ^(uint64(sample)<<32 | uint64(index)); mark > s.First {
		s.First, s.Value, s.Src = mark, v, uint32(src)
	}
}

// A MisfitError reports source values that do not fit the batch's integer
// output type: how many, and the first of them in the batch's order. It
// wraps ErrMisfit.
type MisfitError struct {
	Count  uint64 // elements that did not fit
	Sample int    // the first one's sample, or -1 if unknown
	Index  []int  // its coordinates in the sample (after any transform)
	Src    Dtype  // its source type
	Value  uint64 // its value bits (see Float32Bits)
	Out    Dtype  // the output type
}

func (e *MisfitError) Error() string {
	if e.Sample < 0 {
		return fmt.Sprintf("ptx: %d elements do not fit %v", e.Count, e.Out)
	}
	return fmt.Sprintf("ptx: sample %d at %v: %v value %s does not fit %v (%d elements do not)",
		e.Sample, e.Index, e.Src, formatValue(e.Src, e.Value), e.Out, e.Count)
}

// Unwrap returns ErrMisfit.
func (e *MisfitError) Unwrap() error { return ErrMisfit }
