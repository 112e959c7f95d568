package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/damacy-go/damacy/pipeline"
)

// SamplerSpec is run.sampler: how the boxes are drawn.
type SamplerSpec struct {
	Kind string `json:"kind"` // uniform or foreground
	// Fraction is the foreground sampler's share of boxes centred on
	// foreground (0: the sampler's default).
	Fraction float64 `json:"fraction,omitempty"`
}

// AugmentSpec is run.augment: pipeline.Augment with the axes named as the
// image's (ngffAxes).
type AugmentSpec struct {
	Seed             uint64       `json:"seed"`
	Flip             []AxisChance `json:"flip,omitempty"`
	Rot90            []AxesChance `json:"rot90,omitempty"`
	Permute          []AxesChance `json:"permute,omitempty"`
	Scale            *[2]float64  `json:"scale,omitempty"`
	Offset           *[2]float64  `json:"offset,omitempty"`
	Mean             float64      `json:"mean,omitempty"`
	Std              float64      `json:"std,omitempty"`
	Clip             *[2]float64  `json:"clip,omitempty"`
	IntensitySources []string     `json:"intensity_sources,omitempty"`
}

// AxisChance is an axis and a probability.
type AxisChance struct {
	Axis string  `json:"axis"`
	P    float64 `json:"p"`
}

// AxesChance is a list of axes and a probability.
type AxesChance struct {
	Axes []string `json:"axes"`
	P    float64  `json:"p"`
}

// intensity reports whether a has an intensity transform.
func (a *AugmentSpec) intensity() bool {
	return a.Scale != nil || a.Offset != nil || a.Std != 0 || a.Clip != nil
}

// runSource is a source of the run's batches resolved against the
// dataset; a run without run.config.sources has one, the image in run.config.dtype.
type runSource struct {
	name   string
	label  string // dataset.labels.name, or "" for the image
	dtype  pipeline.Dtype
	axes   []int // the image axes it reads, in its own order
	host   int64 // its staging and decoded-chunk memory (0: the run's)
	device int64
}

// path is where the source's array lies relative to an image.
func (s *runSource) path() string {
	if s.label == "" {
		return ""
	}
	return "labels/" + s.label
}

// axisNames names the image's axes.
func (d *DatasetSpec) axisNames() []string {
	var names []string
	for _, a := range ngffAxes(len(d.Shape)) {
		names = append(names, a.Name)
	}
	return names
}

// sources resolves the run's sources.
func (sc *Scenario) sources() []runSource {
	rank := len(sc.Dataset.Shape)
	all := make([]int, rank)
	for i := range all {
		all[i] = i
	}
	if len(sc.Run.Config.Sources) == 0 {
		return []runSource{{name: pipeline.DefaultSourceName, dtype: sc.Run.Config.Dtype, axes: all}}
	}
	var out []runSource
	for _, s := range sc.Run.Config.Sources {
		rs := runSource{name: s.Name, label: s.Label, dtype: s.Dtype, axes: all, host: s.HostBufferBytes, device: s.DeviceBufferBytes}
		if s.Label != "" {
			rs.axes = all[rank-spaceAxes(rank):]
		}
		out = append(out, rs)
	}
	return out
}

// pipelineSource is s as a pipeline.Source.
func (s *runSource) pipelineSource() pipeline.Source {
	return pipeline.Source{Name: s.name, Label: s.label, Dtype: s.dtype, HostBufferBytes: s.host, DeviceBufferBytes: s.device}
}

// intensitySources names the sources run.augment's intensity transform
// applies to, or nil when it has none.
func (sc *Scenario) intensitySources() []string {
	a := sc.Run.Augment
	switch {
	case a == nil || !a.intensity():
		return nil
	case len(a.IntensitySources) > 0:
		return a.IntensitySources
	}
	return []string{sc.sources()[0].name}
}

// augmentFor is run.augment as the pipeline.Augment of a pipeline whose
// first source reads the image axes axes (in its order), its intensity
// transform applied to the sources named in intensity (none: no intensity
// transform); nil without run.augment.
func (sc *Scenario) augmentFor(axes []int, intensity []string) *pipeline.Augment {
	a := sc.Run.Augment
	if a == nil {
		return nil
	}
	names := sc.Dataset.axisNames()
	index := func(name string) int { return slices.Index(axes, slices.Index(names, name)) }
	out := &pipeline.Augment{Seed: a.Seed}
	for _, f := range a.Flip {
		out.Flip = append(out.Flip, pipeline.AxisChance{Axis: index(f.Axis), P: f.P})
	}
	for _, r := range a.Rot90 {
		out.Rot90 = append(out.Rot90, pipeline.PlaneChance{Axes: [2]int{index(r.Axes[0]), index(r.Axes[1])}, P: r.P})
	}
	for _, p := range a.Permute {
		c := pipeline.AxesChance{P: p.P}
		for _, x := range p.Axes {
			c.Axes = append(c.Axes, index(x))
		}
		out.Permute = append(out.Permute, c)
	}
	if len(intensity) > 0 {
		if a.Scale != nil {
			out.Scale = *a.Scale
		}
		if a.Offset != nil {
			out.Offset = *a.Offset
		}
		out.Mean, out.Std = a.Mean, a.Std
		if a.Clip != nil {
			out.Clip, out.ClipLow, out.ClipHigh = true, a.Clip[0], a.Clip[1]
		}
		out.IntensitySources = intensity
	}
	return out
}

// validateSources checks run.config.sources, run.sampler and run.augment.
func (r *RunSpec) validateSources(d *DatasetSpec) error {
	for i, s := range r.Config.Sources {
		f := fmt.Sprintf("run.config.sources[%d]", i)
		switch {
		case s.Name != "" && !validName(s.Name):
			return fieldErr(f+".name", "%q: use letters, digits, '-', '_' and '.' only", s.Name)
		case s.Path != "":
			return fieldErr(f+".path", "%q: the bench reads the image and its labels (label)", s.Path)
		case i == 0 && s.Label != "":
			return fieldErr(f+".label", "%q: the first source is the image the boxes are drawn in; put label sources after it", s.Label)
		case s.Label != "" && d.Labels == nil:
			return fieldErr(f+".label", "%q: the dataset has no label images (dataset.labels)", s.Label)
		case s.Label != "" && s.Label != d.Labels.Name:
			return fieldErr(f+".label", "%q: the dataset's label images are %q", s.Label, d.Labels.Name)
		case s.Dtype.IsInteger() && s.Label == "":
			return fieldErr(f+".dtype", "%v: integer outputs are for label sources (the image's are f32 or bf16)", s.Dtype)
		}
	}
	if len(r.Config.Sources) == 0 && r.Config.Dtype.IsInteger() {
		return fieldErr("run.config.dtype", "%v: integer outputs are for label sources (the image's are f32 or bf16)", r.Config.Dtype)
	}
	if s := r.Sampler; s != nil {
		switch s.Kind {
		case "uniform":
			if s.Fraction != 0 {
				return fieldErr("run.sampler.fraction", "is for the foreground sampler")
			}
		case "foreground":
			if d.Labels == nil {
				return fieldErr("run.sampler.kind", "foreground needs label images (dataset.labels)")
			}
			if !(s.Fraction >= 0 && s.Fraction <= 1) {
				return fieldErr("run.sampler.fraction", "%v: must be in (0, 1] (0: 0.5)", s.Fraction)
			}
		default:
			return fieldErr("run.sampler.kind", "%q: want uniform or foreground", s.Kind)
		}
	}
	if r.Augment != nil {
		return r.validateAugment(d)
	}
	return nil
}

// validateAugment checks run.augment against the dataset's axes, the
// sample shape and the sources.
func (r *RunSpec) validateAugment(d *DatasetSpec) error {
	a := r.Augment
	names := d.axisNames()
	// Geometric transforms act on every source: only axes all of them have.
	common := names
	srcs := (&Scenario{Dataset: *d, Run: *r}).sources()
	for _, s := range srcs {
		if len(s.axes) < len(common) {
			common = names[len(names)-len(s.axes):]
		}
	}
	axis := func(field, name string) (int, error) {
		if !slices.Contains(common, name) {
			return 0, fieldErr(field, "%q is not an axis of every source (%s)", name, strings.Join(common, ", "))
		}
		return slices.Index(names, name), nil
	}
	prob := func(field string, p float64) error {
		if !(p >= 0 && p <= 1) {
			return fieldErr(field, "%v: want a probability in [0, 1]", p)
		}
		return nil
	}
	for i, f := range a.Flip {
		field := fmt.Sprintf("run.augment.flip[%d]", i)
		if _, err := axis(field+".axis", f.Axis); err != nil {
			return err
		}
		if err := prob(field+".p", f.P); err != nil {
			return err
		}
	}
	equal := func(field string, axes []string, want int) error {
		switch {
		case want > 0 && len(axes) != want:
			return fieldErr(field, "%q: want %d axes", axes, want)
		case len(axes) < 2:
			return fieldErr(field, "%q: want two or more axes", axes)
		}
		var ext int
		for k, name := range axes {
			x, err := axis(fmt.Sprintf("%s[%d]", field, k), name)
			if err != nil {
				return err
			}
			if slices.Contains(axes[:k], name) {
				return fieldErr(field, "%q: axis %q twice", axes, name)
			}
			if k > 0 && r.Config.SampleShape[x] != ext {
				return fieldErr(field, "%q: the sample extents differ (run.config.sample_shape %v); these transforms need equal extents", axes, r.Config.SampleShape)
			}
			ext = r.Config.SampleShape[x]
		}
		return nil
	}
	for i, q := range a.Rot90 {
		field := fmt.Sprintf("run.augment.rot90[%d]", i)
		if err := equal(field+".axes", q.Axes, 2); err != nil {
			return err
		}
		if err := prob(field+".p", q.P); err != nil {
			return err
		}
	}
	for i, q := range a.Permute {
		field := fmt.Sprintf("run.augment.permute[%d]", i)
		if err := equal(field+".axes", q.Axes, 0); err != nil {
			return err
		}
		if err := prob(field+".p", q.P); err != nil {
			return err
		}
	}
	finite := func(v ...float64) bool {
		for _, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return false
			}
		}
		return true
	}
	for _, rg := range []struct {
		field string
		v     *[2]float64
	}{{"run.augment.scale", a.Scale}, {"run.augment.offset", a.Offset}, {"run.augment.clip", a.Clip}} {
		if rg.v != nil && !(finite(rg.v[0], rg.v[1]) && rg.v[0] <= rg.v[1]) {
			return fieldErr(rg.field, "%v: want [low, high], finite, low <= high", *rg.v)
		}
	}
	switch {
	case !finite(a.Mean, a.Std) || a.Std < 0:
		return fieldErr("run.augment.std", "%v (mean %v): want a finite mean and a standard deviation > 0", a.Std, a.Mean)
	case a.Mean != 0 && a.Std == 0:
		return fieldErr("run.augment.mean", "%v without run.augment.std: normalisation needs both", a.Mean)
	case len(a.IntensitySources) > 0 && !a.intensity():
		return fieldErr("run.augment.intensity_sources", "no intensity transform (scale, offset, std or clip) to apply")
	}
	for i, name := range a.IntensitySources {
		k := slices.IndexFunc(srcs, func(s runSource) bool { return s.name == name })
		field := fmt.Sprintf("run.augment.intensity_sources[%d]", i)
		switch {
		case k < 0:
			return fieldErr(field, "%q is not a source", name)
		case srcs[k].dtype.IsInteger():
			return fieldErr(field, "%q has an integer output (%v): intensity transforms are for f32 and bf16 outputs", name, srcs[k].dtype)
		}
	}
	return nil
}

// String describes the transforms for the text report.
func (a *AugmentSpec) String() string {
	var parts []string
	for _, f := range a.Flip {
		parts = append(parts, fmt.Sprintf("flip %s p=%g", f.Axis, f.P))
	}
	for _, r := range a.Rot90 {
		parts = append(parts, fmt.Sprintf("rot90 %s p=%g", strings.Join(r.Axes, "-"), r.P))
	}
	for _, q := range a.Permute {
		parts = append(parts, fmt.Sprintf("permute %s p=%g", strings.Join(q.Axes, "-"), q.P))
	}
	if a.Std != 0 {
		parts = append(parts, fmt.Sprintf("(v - %g) / %g", a.Mean, a.Std))
	}
	if a.Scale != nil {
		parts = append(parts, fmt.Sprintf("scale %g..%g", a.Scale[0], a.Scale[1]))
	}
	if a.Offset != nil {
		parts = append(parts, fmt.Sprintf("offset %g..%g", a.Offset[0], a.Offset[1]))
	}
	if a.Clip != nil {
		parts = append(parts, fmt.Sprintf("clip %g..%g", a.Clip[0], a.Clip[1]))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (seed %d)", a.Seed)
}
