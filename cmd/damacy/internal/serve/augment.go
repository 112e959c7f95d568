package serve

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/damacy-go/damacy/pipeline"
)

// augmentSpec is hello's config.augment (pipeline.Augment with the
// protocol's names).
type augmentSpec struct {
	Seed uint64 `json:"seed"`
	Flip []struct {
		Axis int     `json:"axis"`
		P    float64 `json:"p"`
	} `json:"flip"`
	Rot90 []struct {
		Axes [2]int  `json:"axes"`
		P    float64 `json:"p"`
	} `json:"rot90"`
	Permute []struct {
		Axes []int   `json:"axes"`
		P    float64 `json:"p"`
	} `json:"permute"`
	Scale            *[2]float64 `json:"scale"`
	Offset           *[2]float64 `json:"offset"`
	Mean             float64     `json:"mean"`
	Std              float64     `json:"std"`
	Clip             *[2]float64 `json:"clip"`
	IntensitySources []string    `json:"intensity_sources"`
}

// augmentOf maps config.augment onto a pipeline.Augment (which New
// validates).
func augmentOf(v json.RawMessage) (*pipeline.Augment, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	var sp augmentSpec
	if err := dec.Decode(&sp); err != nil {
		return nil, statusErrorf(statusInval, "config.augment = %s: must be {seed, flip: [{axis, p}], rot90: [{axes, p}], permute: [{axes, p}], scale: [lo, hi], offset: [lo, hi], mean, std, clip: [lo, hi], intensity_sources: [names]}: %v", v, err)
	}
	a := &pipeline.Augment{Seed: sp.Seed, Mean: sp.Mean, Std: sp.Std, IntensitySources: sp.IntensitySources}
	for _, f := range sp.Flip {
		a.Flip = append(a.Flip, pipeline.AxisChance{Axis: f.Axis, P: f.P})
	}
	for _, r := range sp.Rot90 {
		a.Rot90 = append(a.Rot90, pipeline.PlaneChance{Axes: r.Axes, P: r.P})
	}
	for _, p := range sp.Permute {
		a.Permute = append(a.Permute, pipeline.AxesChance{Axes: p.Axes, P: p.P})
	}
	if sp.Scale != nil {
		a.Scale = *sp.Scale
	}
	if sp.Offset != nil {
		a.Offset = *sp.Offset
	}
	if sp.Clip != nil {
		a.Clip, a.ClipLow, a.ClipHigh = true, sp.Clip[0], sp.Clip[1]
	}
	return a, nil
}

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
