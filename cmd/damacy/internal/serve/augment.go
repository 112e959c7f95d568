package serve

import (
	"math"

	"github.com/damacy-go/damacy/pipeline"
)

// transformMsg is one sample's transform in a BATCH (pipeline.Transform;
// an infinite clip bound is null).
type transformMsg struct {
	Perm      []int    `json:"perm"`
	Flip      []bool   `json:"flip"`
	Intensity bool     `json:"intensity"`
	Scale     float32  `json:"scale"`
	Offset    float32  `json:"offset"`
	Low       *float32 `json:"low"`
	High      *float32 `json:"high"`
}

// transformsMsg describes a tensor's transforms, or nil without
// augmentation.
func transformsMsg(xf []pipeline.Transform) []transformMsg {
	if xf == nil {
		return nil
	}
	out := make([]transformMsg, len(xf))
	for i, t := range xf {
		m := transformMsg{Perm: t.Perm, Flip: t.Flip, Intensity: t.Intensity, Scale: t.Scale, Offset: t.Offset}
		if !math.IsInf(float64(t.Low), 0) {
			m.Low = &t.Low
		}
		if !math.IsInf(float64(t.High), 0) {
			m.High = &t.High
		}
		out[i] = m
	}
	return out
}
