// Package sampler draws the boxes a training or inference loop reads:
// uniform random boxes, boxes centred on foreground voxels of a label or
// mask (with a uniform share, as MONAI's RandCropByPosNegLabel), and every
// box of a sliding-window grid (as MONAI's sliding-window inference).
//
// A Sampler is made once by New, which reads the arrays' metadata (and,
// for the foreground sampler, one coarse level of each label); after that
// every draw is a pure function of (Config.Seed, epoch, index): draw g of
// epoch e is the same on every rank, machine and run, made without the
// draws before it. Rank r of Config.World takes the global indices r,
// r+World, r+2*World, ... (the RANK / WORLD_SIZE convention of
// torch.distributed), so ranks never draw the same index. A position in
// the sequence is a State{Epoch, Next}; a loop restored from a saved
// State draws exactly what the uninterrupted one would have.
//
// Each Draw carries a pipeline.Sample, ready for Pipeline.Push; Samples
// feeds a pipeline lazily:
//
//	s, err := sampler.New(ctx, sampler.Config{Arrays: arrays, Box: []int64{64, 64, 64},
//		Seed: seed, Rank: rank, World: world, SamplesPerEpoch: 10000})
//	...
//	st := sampler.State{Epoch: epoch} // or a saved one: Next = samples consumed
//	p.PushSeq(s.Samples(st))
//	p.Flush()
//
// The Python client reaches the same samplers through `damacy serve`.
package sampler

import (
	"context"
	"fmt"
	"iter"
	"math"
	"slices"
	"sort"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

// Kind is what a sampler draws.
type Kind uint8

// The sampler kinds.
const (
	// Uniform draws boxes uniformly inside each array (the zero Kind).
	Uniform Kind = iota
	// Foreground centres Config.Fraction of the boxes on foreground voxels
	// and draws the rest as Uniform does.
	Foreground
	// Grid visits every box of a sliding window over every array, in order.
	Grid
)

var kindNames = [...]string{Uniform: "uniform", Foreground: "foreground", Grid: "grid"}

// String returns "uniform", "foreground" or "grid".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// ParseKind returns the Kind named name ("uniform", "foreground", "grid").
func ParseKind(name string) (Kind, error) {
	for k, n := range kindNames {
		if n == name {
			return Kind(k), nil
		}
	}
	return 0, invalid("", "kind", "%q is not a sampler kind (want uniform, foreground or grid)", name)
}

// Defaults of Config's zero fields.
const (
	// DefaultFraction is the share of foreground-centred boxes: one in
	// two, MONAI's default of pos=1, neg=1.
	DefaultFraction = 0.5
	// DefaultMaxLabelVoxels bounds the voxels of the label level searched
	// for foreground (16 Mi voxels).
	DefaultMaxLabelVoxels = 1 << 24
	// AutoLevel, as Config.LabelLevel, picks the finest level of each label
	// with at most MaxLabelVoxels voxels.
	AutoLevel = -1
)

// Array is one array the sampler draws from.
type Array struct {
	// URI names a zarr array or an OME-NGFF image (as pipeline.Sample.URI).
	URI string
	// Level is the multiscale level the boxes are read at (as
	// pipeline.Sample.Level): boxes are in that level's voxels.
	Level int
	// Weight is the array's relative chance of being drawn by the random
	// samplers. When every Weight is 0, arrays are weighted by their
	// volume (voxels of Level); otherwise by Weight, and an array of
	// weight 0 is never drawn. Ignored by Grid.
	Weight float64
	// Label names the array's label or mask (Foreground only): a zarr
	// array or OME-NGFF image whose voxels != 0 are foreground. Its axes
	// are matched to the array's by name (OME-NGFF axes, or zarr v3
	// dimension_names), or by position when they are equal in number and
	// either side is unnamed; the array's other axes are drawn uniformly.
	// Empty: the array itself, whose voxels > Config.Threshold are
	// foreground.
	Label string
}

// Config configures a Sampler. The zero value of each field means the
// default its comment names.
type Config struct {
	Kind   Kind
	Arrays []Array
	// Box is the box's extent along each axis, in voxels of each array's
	// Level, in the arrays' axis order; every array has len(Box) axes. An
	// array smaller than the box along an axis gets boxes starting at 0
	// there, reaching outside it (the outside reads as the fill value).
	Box []int64
	// Seed seeds every draw, with the epoch.
	Seed uint64
	// Rank is this process's rank, in [0, World).
	Rank int
	// World is the number of ranks sharing the sequence (0: 1).
	World int
	// SamplesPerEpoch is the random samplers' draws per epoch over all
	// ranks. Required unless Infinite; Grid's epoch is its size and it
	// must be 0 there.
	SamplesPerEpoch int64
	// Infinite makes the epoch endless (random samplers only): rank r
	// takes indices r, r+World, ... for ever.
	Infinite bool
	// DropLast, when the epoch's draws do not divide among the ranks,
	// drops the last ones so every rank gets floor(total/World); without
	// it every rank gets ceil(total/World), the missing ones repeating the
	// epoch's first draws (as torch's DistributedSampler pads).
	DropLast bool

	// Fraction is Foreground's share of boxes centred on foreground, in
	// (0, 1] (0: DefaultFraction); the others are uniform.
	Fraction float64
	// LabelLevel is the level of each label (or, without a label, of the
	// array) searched for foreground: a level index, or AutoLevel. The
	// level must have at most MaxLabelVoxels voxels.
	LabelLevel int
	// MaxLabelVoxels bounds the voxels of the level searched (0:
	// DefaultMaxLabelVoxels; -1: no bound). The search keeps the
	// foreground as runs of consecutive voxels, in memory.
	MaxLabelVoxels int64
	// Threshold: an array without a Label has foreground where its
	// values (of the level searched) are > Threshold.
	Threshold float64

	// Overlap is Grid's overlap of neighbouring windows along each axis,
	// in voxels, in [0, Box[k]); nil means none. One value applies to
	// every axis.
	Overlap []int64
	// OverlapFraction is the overlap as a fraction of Box along each
	// axis, in [0, 1): the step is max(1, floor(Box[k]*(1-f))), as MONAI
	// computes it. At most one of Overlap and OverlapFraction is set.
	OverlapFraction []float64

	// Open resolves a URI to a store and the node's path in it (as
	// zarr/remote's Opener.Open); nil opens local directories only.
	Open func(ctx context.Context, uri string) (zarr.Store, string, error)
}

// State is a rank's position in the sampler's sequence: Next draws of
// Epoch have been taken.
type State struct {
	Epoch int64
	Next  int64
}

// Draw is one box to read.
type Draw struct {
	pipeline.Sample
	// Index is the draw's global index in its epoch: rank r's i-th draw is
	// r + i*World, less the epoch's total when padding wraps it around.
	Index int64
	// Array is the index of the array in Config.Arrays.
	Array int
	// Window is Grid's window index along each axis (the box's start is
	// in Box); nil for the random samplers.
	Window []int64
	// Foreground reports a Foreground box centred on a foreground voxel;
	// false for the uniform share and for arrays without foreground.
	Foreground bool
}

// Info describes a Sampler.
type Info struct {
	Kind  Kind
	Rank  int
	World int
	// Total is the draws of one epoch over all ranks (before padding or
	// dropping); 0 when infinite.
	Total int64
	// PerRank is this rank's draws per epoch; -1 when infinite.
	PerRank int64
	// Padded and Dropped count the draws repeated (to pad) or left out
	// (DropLast) per epoch, over all ranks.
	Padded, Dropped int64
	Arrays          []ArrayInfo
	// NoForeground counts the arrays whose label (or thresholded level)
	// has no foreground: every draw there is uniform.
	NoForeground int
}

// ArrayInfo describes one array of the sampler.
type ArrayInfo struct {
	URI   string
	Level int
	Shape []int64  // shape of Level
	Axes  []string // axis names; nil when the array has none
	// Weight is the array's chance of being drawn by the random samplers.
	Weight float64
	// Windows is Grid's window count along each axis.
	Windows []int64
	// Label, LabelLevel and LabelShape say where Foreground searched:
	// the label (or the array itself) and the level's index and shape.
	Label      string
	LabelLevel int
	LabelShape []int64
	// ForegroundVoxels counts the foreground voxels of that level.
	ForegroundVoxels int64
}

// Sampler draws boxes. It is immutable once made, and safe for concurrent
// use.
type Sampler struct {
	kind     Kind
	seed     uint64
	rank     int64
	world    int64
	box      []int64
	arrays   []*array
	cum      []uint64 // cumulative integer weights of the arrays (random samplers)
	gridCum  []int64  // cumulative window counts of the arrays (Grid)
	fraction uint64   // Foreground's share, in units of 2^-53
	total    int64    // draws per epoch over all ranks; 0 when infinite
	perRank  int64    // -1 when infinite
	info     Info
}

// array is one array's geometry and what the sampler derived from it.
type array struct {
	uri     string
	level   int
	shape   []int64
	names   []string
	frame   *frame      // the level's OME-NGFF scale and translation; nil for a plain array
	step    []int64     // Grid's window step along each axis
	windows []int64     // Grid's window count along each axis
	fg      *foreground // Foreground's search result
	src     *node       // the opened URI
}

// New validates cfg, opens every array (and label), and returns the
// Sampler. Errors are *pipeline.Error naming the URI and the field.
func New(ctx context.Context, cfg Config) (*Sampler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.World == 0 {
		cfg.World = 1
	}
	if cfg.Open == nil {
		cfg.Open = openDir
	}
	s := &Sampler{kind: cfg.Kind, seed: cfg.Seed, rank: int64(cfg.Rank), world: int64(cfg.World), box: slices.Clone(cfg.Box)}
	for i, ac := range cfg.Arrays {
		if err := ctx.Err(); err != nil {
			return nil, &pipeline.Error{Op: "sampler", Kind: pipeline.ErrCanceled, Err: err}
		}
		a, err := openArray(ctx, cfg.Open, ac.URI, ac.Level, fmt.Sprintf("Arrays[%d]", i))
		if err != nil {
			return nil, err
		}
		if len(a.shape) != len(cfg.Box) {
			return nil, &pipeline.Error{Op: "sampler", Kind: pipeline.ErrRank, URI: ac.URI,
				Err: fmt.Errorf("Config.Box has %d axes, level %d of the array has %d (shape %v)", len(cfg.Box), ac.Level, len(a.shape), a.shape)}
		}
		s.arrays = append(s.arrays, a)
	}
	var err error
	switch cfg.Kind {
	case Grid:
		err = s.layGrid(cfg)
	case Foreground:
		if err = s.weigh(cfg); err == nil {
			err = s.findForeground(ctx, cfg)
		}
	default:
		err = s.weigh(cfg)
	}
	if err != nil {
		return nil, err
	}
	if cfg.Kind != Grid {
		s.total = cfg.SamplesPerEpoch
	}
	s.perRank, s.info.Padded, s.info.Dropped = split(s.total, s.world, cfg.Infinite, cfg.DropLast)
	s.describe(cfg)
	return s, nil
}

// split returns the draws per rank of an epoch of total draws, and the
// draws padded or dropped over all ranks.
func split(total, world int64, infinite, dropLast bool) (perRank, padded, dropped int64) {
	switch {
	case infinite:
		return -1, 0, 0
	case dropLast:
		perRank = total / world
		return perRank, 0, total - perRank*world
	}
	perRank = (total + world - 1) / world
	return perRank, perRank*world - total, 0
}

// weigh sets the random samplers' cumulative integer weights: volumes,
// or Weight scaled to sum to about 2^53 (each positive weight at least 1).
func (s *Sampler) weigh(cfg Config) error {
	var sum float64
	for _, ac := range cfg.Arrays {
		sum += ac.Weight
	}
	if math.IsInf(sum, 0) {
		return invalid("", "Arrays", "the weights sum to more than the largest float64: scale them down")
	}
	s.cum = make([]uint64, len(s.arrays))
	var acc uint64
	for i, a := range s.arrays {
		var w uint64
		if sum == 0 {
			v, ok := volume(a.shape)
			if !ok || v > math.MaxInt64-acc {
				return invalid(a.uri, fmt.Sprintf("Arrays[%d]", i), "the arrays' volumes overflow: give weights")
			}
			w = v
		} else if wt := cfg.Arrays[i].Weight; wt > 0 {
			w = max(1, uint64(math.Round(float64(wt/sum)*(1<<53))))
		}
		acc += w
		s.cum[i] = acc
	}
	if acc == 0 {
		return invalid("", "Arrays", "every array has volume 0")
	}
	return nil
}

// volume returns the product of shape, and false when it overflows int64.
func volume(shape []int64) (uint64, bool) {
	v := uint64(1)
	for _, n := range shape {
		if n != 0 && v > math.MaxInt64/uint64(n) {
			return 0, false
		}
		v *= uint64(n)
	}
	return v, true
}

// describe fills s.info.
func (s *Sampler) describe(cfg Config) {
	s.info.Kind, s.info.Rank, s.info.World = s.kind, int(s.rank), int(s.world)
	s.info.Total, s.info.PerRank = s.total, s.perRank
	var prev uint64
	for i, a := range s.arrays {
		ai := ArrayInfo{URI: a.uri, Level: a.level, Shape: slices.Clone(a.shape), Axes: slices.Clone(a.names), Windows: slices.Clone(a.windows)}
		if s.cum != nil {
			ai.Weight = float64(s.cum[i]-prev) / float64(s.cum[len(s.cum)-1])
			prev = s.cum[i]
		}
		if a.fg != nil {
			ai.Label, ai.LabelLevel, ai.LabelShape, ai.ForegroundVoxels = a.fg.uri, a.fg.level, slices.Clone(a.fg.shape), a.fg.count
			if a.fg.count == 0 {
				s.info.NoForeground++
			}
		}
		s.info.Arrays = append(s.info.Arrays, ai)
	}
}

// Info describes the sampler.
func (s *Sampler) Info() Info {
	in := s.info
	in.Arrays = make([]ArrayInfo, len(s.info.Arrays))
	for i, a := range s.info.Arrays {
		a.Shape, a.Axes, a.Windows, a.LabelShape = slices.Clone(a.Shape), slices.Clone(a.Axes), slices.Clone(a.Windows), slices.Clone(a.LabelShape)
		in.Arrays[i] = a
	}
	return in
}

// Len returns this rank's draws per epoch, or -1 when the sampler is
// infinite.
func (s *Sampler) Len() int64 { return s.perRank }

// At returns this rank's draw i of epoch, and false when i is past the
// epoch's end or either is negative.
func (s *Sampler) At(epoch, i int64) (Draw, bool) {
	if epoch < 0 || i < 0 || s.perRank >= 0 && i >= s.perRank {
		return Draw{}, false
	}
	g := s.rank + i*s.world
	if s.total > 0 && g >= s.total {
		g %= s.total // padding repeats the epoch's first draws
	}
	var d Draw
	if s.kind == Grid {
		d = s.window(g)
	} else {
		d = s.random(epoch, g)
	}
	d.Sample.Seed = SampleSeed(epoch, g)
	return d, true
}

// SampleSeed is the pipeline.Sample.Seed of global draw g of epoch (which
// selects its transform with pipeline.Config.Augment): (epoch<<40 | g) + 1
// modulo 2^64, distinct and never 0 for draws below 2^40 of epochs below
// 2^24, so a resumed run gets the transforms the uninterrupted one got.
func SampleSeed(epoch, g int64) uint64 {
	return (uint64(epoch)<<40 | uint64(g)) + 1
}

// Draws returns up to n of this rank's draws of st.Epoch from st.Next on,
// fewer at the epoch's end.
func (s *Sampler) Draws(st State, n int) []Draw {
	var out []Draw
	for i := st.Next; len(out) < n; i++ {
		d, ok := s.At(st.Epoch, i)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

// Seq yields this rank's draws of st.Epoch from st.Next to the epoch's end
// (for ever when infinite). After k draws the position is
// State{st.Epoch, st.Next + k}.
func (s *Sampler) Seq(st State) iter.Seq[Draw] {
	return func(yield func(Draw) bool) {
		for i := st.Next; ; i++ {
			d, ok := s.At(st.Epoch, i)
			if !ok || !yield(d) {
				return
			}
		}
	}
}

// Samples yields the Samples of Seq(st), for Pipeline.PushSeq.
func (s *Sampler) Samples(st State) iter.Seq[pipeline.Sample] {
	return func(yield func(pipeline.Sample) bool) {
		for d := range s.Seq(st) {
			if !yield(d.Sample) {
				return
			}
		}
	}
}

// random makes draw g of epoch of a random sampler.
func (s *Sampler) random(epoch, g int64) Draw {
	r := drawStream(s.seed, epoch, g)
	total := s.cum[len(s.cum)-1]
	pick := uint64(r.below(int64(total))) // total <= 2^63: volumes are checked, weights sum to about 2^53 each
	ai := sort.Search(len(s.cum), func(i int) bool { return s.cum[i] > pick })
	a := s.arrays[ai]
	d := Draw{Sample: pipeline.Sample{URI: a.uri, Level: a.level, Box: make([]pipeline.Range, len(s.box))}, Index: g, Array: ai}
	if s.kind == Foreground && r.chance(s.fraction) && a.fg.count > 0 {
		a.fg.centre(&r, a.shape, s.box, d.Box)
		d.Foreground = true
		return d
	}
	for k, b := range s.box {
		var start int64
		if n := a.shape[k]; n > b {
			start = r.below(n - b + 1)
		}
		d.Box[k] = pipeline.Range{Start: start, Stop: start + b}
	}
	return d
}

// invalid is an ErrInvalid error naming uri and the Config field.
func invalid(uri, field, format string, args ...any) *pipeline.Error {
	return &pipeline.Error{Op: "sampler", Kind: pipeline.ErrInvalid, URI: uri, Err: fmt.Errorf("Config."+field+": "+format, args...)}
}

// validate checks what needs no array opened.
func (cfg *Config) validate() error {
	if cfg.Kind > Grid {
		return invalid("", "Kind", "%v is not a sampler kind", cfg.Kind)
	}
	if len(cfg.Arrays) == 0 {
		return invalid("", "Arrays", "no arrays")
	}
	if len(cfg.Box) == 0 {
		return invalid("", "Box", "no axes")
	}
	for k, b := range cfg.Box {
		if b < 1 {
			return invalid("", fmt.Sprintf("Box[%d]", k), "%d: want >= 1", b)
		}
	}
	if cfg.World < 0 {
		return invalid("", "World", "%d: want >= 1 (0: 1)", cfg.World)
	}
	if w := max(cfg.World, 1); cfg.Rank < 0 || cfg.Rank >= w {
		return invalid("", "Rank", "%d: want 0 <= Rank < World = %d", cfg.Rank, w)
	}
	for i, a := range cfg.Arrays {
		f := fmt.Sprintf("Arrays[%d]", i)
		switch {
		case a.URI == "":
			return invalid("", f+".URI", "empty")
		case a.Level < 0:
			return invalid(a.URI, f+".Level", "%d: want >= 0", a.Level)
		case !(a.Weight >= 0) || math.IsInf(a.Weight, 0):
			return invalid(a.URI, f+".Weight", "%v: want a finite number >= 0", a.Weight)
		case a.Label != "" && cfg.Kind != Foreground:
			return invalid(a.URI, f+".Label", "a label is for the foreground sampler, not %v", cfg.Kind)
		}
	}
	if cfg.Kind == Grid {
		switch {
		case cfg.Infinite:
			return invalid("", "Infinite", "a grid is finite: its epoch is every window once")
		case cfg.SamplesPerEpoch != 0:
			return invalid("", "SamplesPerEpoch", "%d: a grid's epoch is its size (leave it 0)", cfg.SamplesPerEpoch)
		}
		return cfg.validateOverlap()
	}
	if cfg.Overlap != nil || cfg.OverlapFraction != nil {
		return invalid("", "Overlap", "overlap is for the grid sampler, not %v", cfg.Kind)
	}
	switch {
	case cfg.Infinite && cfg.SamplesPerEpoch != 0:
		return invalid("", "SamplesPerEpoch", "%d with Infinite: an infinite sampler has no epoch length", cfg.SamplesPerEpoch)
	case !cfg.Infinite && cfg.SamplesPerEpoch <= 0:
		return invalid("", "SamplesPerEpoch", "%d: want > 0 (or Infinite)", cfg.SamplesPerEpoch)
	}
	if cfg.Kind == Foreground {
		switch {
		case !(cfg.Fraction >= 0 && cfg.Fraction <= 1):
			return invalid("", "Fraction", "%v: want a fraction in (0, 1] (0: %v)", cfg.Fraction, DefaultFraction)
		case cfg.LabelLevel < AutoLevel:
			return invalid("", "LabelLevel", "%d: want a level index >= 0 or AutoLevel (-1)", cfg.LabelLevel)
		case cfg.MaxLabelVoxels < -1:
			return invalid("", "MaxLabelVoxels", "%d: want > 0 (0: %d, -1: no bound)", cfg.MaxLabelVoxels, DefaultMaxLabelVoxels)
		case math.IsNaN(cfg.Threshold):
			return invalid("", "Threshold", "NaN")
		}
	}
	return nil
}
