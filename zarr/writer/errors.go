package writer

import "errors"

// ErrInvalid is what every rejected argument wraps: a bad Spec, NGFFSpec or
// Synth field, or a region that is not block-aligned.
var ErrInvalid = errors.New("invalid argument")

// ErrExists means the target directory already holds zarr metadata that
// differs from what would be written: a different array or group.
var ErrExists = errors.New("a different zarr node already exists")

// SpecError reports a field of a Spec, NGFFSpec or Synth that cannot be
// written. It wraps ErrInvalid.
type SpecError struct {
	Field  string // the field at fault, as Go spells it: "Spec.ShardShape", "NGFFSpec.Axes[1].Name"
	Reason string // what is wrong with it
}

func (e *SpecError) Error() string { return "writer: " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalid.
func (e *SpecError) Unwrap() error { return ErrInvalid }
