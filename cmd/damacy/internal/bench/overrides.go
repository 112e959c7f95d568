package bench

import (
	"fmt"

	"github.com/damacy-go/damacy/pipeline"
)

// RunOverrides are damacy bench's flags that change a scenario's run; a
// zero field (Warmup: negative) leaves the scenario's value.
type RunOverrides struct {
	Boxes     string // "chunks" or a box shape: see SetBoxes
	BatchSize int
	Batches   int
	Warmup    int
	Dtype     string
}

// Override applies o to the scenario's run and checks the scenario again.
// A new batch size makes a run of run.boxes chunks read every chunk again,
// unless o.Batches says otherwise.
func (sc *Scenario) Override(o RunOverrides) error {
	r := &sc.Run
	if o.BatchSize != 0 {
		if o.BatchSize < 0 {
			return fmt.Errorf("--batch-size %d: must be positive", o.BatchSize)
		}
		r.Config.BatchSize = o.BatchSize
		if r.chunked() {
			r.Batches = 0
		}
	}
	if o.Boxes != "" {
		if err := sc.SetBoxes(o.Boxes); err != nil {
			return err
		}
	}
	if o.Batches != 0 {
		r.Batches = o.Batches
	}
	if o.Warmup >= 0 {
		r.Warmup = o.Warmup
	}
	if o.Dtype != "" {
		dt, err := pipeline.ParseDtype(o.Dtype)
		if err != nil {
			return fmt.Errorf("--dtype %s: %w", o.Dtype, err)
		}
		r.Config.Dtype = dt
	}
	return sc.revalidate()
}
