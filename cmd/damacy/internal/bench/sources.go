package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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

// intensitySources names the sources run.config.augment's intensity
// transform applies to (pipeline.Augment.IntensitySources; empty: the
// first source), or nil when it has none.
func (sc *Scenario) intensitySources() []string {
	a := sc.Run.Config.Augment
	switch {
	case a == nil || !a.HasIntensity():
		return nil
	case len(a.IntensitySources) > 0:
		return a.IntensitySources
	}
	return []string{sc.sources()[0].name}
}

// augmentFor is run.config.augment, whose axes are the image's, as the
// pipeline.Augment of a pipeline whose one source reads the image axes
// axes (in its order): image axis a becomes slices.Index(axes, a) (the
// scenario's validation made every augment axis one of every source's).
// Its intensity transform stays when intensity is set, applied to the
// sources it names, and is dropped when it is empty. Nil without
// run.config.augment.
func (sc *Scenario) augmentFor(axes []int, intensity []string) *pipeline.Augment {
	a := sc.Run.Config.Augment
	if a == nil {
		return nil
	}
	index := func(x int) int { return slices.Index(axes, x) }
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
		out.Scale, out.Offset, out.Mean, out.Std = a.Scale, a.Offset, a.Mean, a.Std
		out.Clip, out.ClipLow, out.ClipHigh = a.Clip, a.ClipLow, a.ClipHigh
		out.IntensitySources = slices.Clone(intensity)
	}
	return out
}

// validateSources checks run.config.sources, run.sampler and
// run.config.augment.
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
	if r.Config.Augment != nil {
		return r.validateAugment(d)
	}
	return nil
}

// validateAugment checks what of run.config.augment depends on the
// dataset and the bench's sources: its axes are the image's (the first
// source's, the box's: 0..rank-1) and each is an axis of every source,
// since the geometric transforms act on every source alike (a label
// source has the image's space axes only; its pipeline apart maps them,
// apartConfigs); its intensity_sources are float sources. Ranges that
// depend on neither (probabilities, distinct axes of equal sample
// extents, the intensity ranges) are pipeline.New's to check, as for the
// rest of run.config.
func (r *RunSpec) validateAugment(d *DatasetSpec) error {
	a := r.Config.Augment
	names := d.axisNames()
	srcs := (&Scenario{Dataset: *d, Run: *r}).sources()
	axis := func(field string, x int) error {
		if x < 0 || x >= len(names) {
			return fieldErr(field, "%d: want an axis of the image (%s)", x, numberedAxes(names, nil))
		}
		for _, s := range srcs {
			if !slices.Contains(s.axes, x) {
				return fieldErr(field, "%d (%s) is not an axis of source %q (%s): the geometric transforms act on every source", x, names[x], s.name, numberedAxes(names, s.axes))
			}
		}
		return nil
	}
	for i, f := range a.Flip {
		if err := axis(fmt.Sprintf("run.config.augment.flip[%d].axis", i), f.Axis); err != nil {
			return err
		}
	}
	for i, q := range a.Rot90 {
		for k, x := range q.Axes {
			if err := axis(fmt.Sprintf("run.config.augment.rot90[%d].axes[%d]", i, k), x); err != nil {
				return err
			}
		}
	}
	for i, q := range a.Permute {
		for k, x := range q.Axes {
			if err := axis(fmt.Sprintf("run.config.augment.permute[%d].axes[%d]", i, k), x); err != nil {
				return err
			}
		}
	}
	for i, name := range a.IntensitySources {
		k := slices.IndexFunc(srcs, func(s runSource) bool { return s.name == name })
		field := fmt.Sprintf("run.config.augment.intensity_sources[%d]", i)
		switch {
		case k < 0:
			return fieldErr(field, "%q is not a source", name)
		case srcs[k].dtype.IsInteger():
			return fieldErr(field, "%q has an integer output (%v): intensity transforms are for f32 and bf16 outputs", name, srcs[k].dtype)
		}
	}
	return nil
}

// numberedAxes lists the image's axes names as numbered in
// run.config.augment ("0 c, 1 z, 2 y, 3 x"): those in axes, or all
// when axes is nil.
func numberedAxes(names []string, axes []int) string {
	var parts []string
	for i, n := range names {
		if axes == nil || slices.Contains(axes, i) {
			parts = append(parts, fmt.Sprintf("%d %s", i, n))
		}
	}
	return strings.Join(parts, ", ")
}

// AugmentReport is run.config.augment in the report: in the JSON as
// run.config.augment spells it, in the text with its axes named as the
// image's.
type AugmentReport struct {
	pipeline.Augment
	// Axes names the image's axes (ngffAxes), which the text names the
	// augment's axes by.
	Axes []string `json:"-"`
}

// augmentReport is the report's run.config.augment, or nil without one.
func (sc *Scenario) augmentReport() *AugmentReport {
	a := sc.Run.Config.Augment
	if a == nil {
		return nil
	}
	return &AugmentReport{Augment: *a, Axes: sc.Dataset.axisNames()}
}

// MarshalJSON writes a as pipeline.DecodeConfig reads an augment (clip
// as [low, high]).
func (a *AugmentReport) MarshalJSON() ([]byte, error) {
	w := struct {
		pipeline.Augment
		Clip *[2]float64 `json:"clip,omitempty"`
	}{Augment: a.Augment}
	if a.Augment.Clip {
		w.Clip = &[2]float64{a.ClipLow, a.ClipHigh}
	}
	return json.Marshal(w)
}

// String describes the transforms for the text report, the axes named.
func (a *AugmentReport) String() string {
	name := func(x int) string {
		if x >= 0 && x < len(a.Axes) {
			return a.Axes[x]
		}
		return strconv.Itoa(x)
	}
	names := func(xs []int) string {
		var s []string
		for _, x := range xs {
			s = append(s, name(x))
		}
		return strings.Join(s, "-")
	}
	var parts []string
	for _, f := range a.Flip {
		parts = append(parts, fmt.Sprintf("flip %s p=%g", name(f.Axis), f.P))
	}
	for _, r := range a.Rot90 {
		parts = append(parts, fmt.Sprintf("rot90 %s p=%g", names(r.Axes[:]), r.P))
	}
	for _, q := range a.Permute {
		parts = append(parts, fmt.Sprintf("permute %s p=%g", names(q.Axes), q.P))
	}
	if a.Std != 0 {
		parts = append(parts, fmt.Sprintf("(v - %g) / %g", a.Mean, a.Std))
	}
	if a.Scale != [2]float64{} {
		parts = append(parts, fmt.Sprintf("scale %g..%g", a.Scale[0], a.Scale[1]))
	}
	if a.Offset != [2]float64{} {
		parts = append(parts, fmt.Sprintf("offset %g..%g", a.Offset[0], a.Offset[1]))
	}
	if a.Augment.Clip {
		parts = append(parts, fmt.Sprintf("clip %g..%g", a.ClipLow, a.ClipHigh))
	}
	if len(a.IntensitySources) > 0 && a.Augment.HasIntensity() {
		parts = append(parts, "intensity on "+strings.Join(a.IntensitySources, ", "))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (seed %d)", a.Seed)
}
