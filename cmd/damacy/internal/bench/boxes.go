package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"

	"github.com/damacy-go/damacy/pipeline"
	boxsampler "github.com/damacy-go/damacy/pipeline/sampler"
	"github.com/damacy-go/damacy/zarr"
)

// boxSet is the boxes a benchmark reads, as --boxes-out writes them for
// peers (cmd/damacy/peers) to read the same boxes.
type boxSet struct {
	Scenario    string      `json:"scenario"`
	DatasetDir  string      `json:"dataset_dir"`     // absolute path, or the remote dataset's URI
	Arrays      []string    `json:"arrays"`          // image group paths, relative to dataset_dir
	Level       int         `json:"level"`           // the multiscale level read (its array is <image>/<level>)
	Plain       bool        `json:"plain,omitempty"` // arrays are zarr arrays, read as they are (damacy bench ARRAY): no level
	DataTypes   []string    `json:"data_types"`      // per array
	SampleShape []int64     `json:"sample_shape"`
	BatchSize   int         `json:"batch_size"`
	Warmup      int         `json:"warmup"`  // batches
	Batches     int         `json:"batches"` // measured batches
	Dtype       string      `json:"dtype"`   // the first source's output dtype: "float32", "bfloat16", ...
	Sources     []boxSource `json:"sources"` // each batch's tensors, the first the image's
	Sampler     string      `json:"sampler"` // "uniform" or "foreground"
	Samples     []boxSample `json:"samples"` // (warmup + batches) * batch_size, warmup first

	index  map[string]int                  // per image URI, its index in Arrays
	stream func() func() (boxSample, bool) // the run's box draws from the first on, and whether each is centred on foreground
	remote *remoteData                     // the dataset when it is not a local directory
	// foreground counts the boxes of Samples the foreground sampler
	// centred on foreground.
	foreground int
}

// boxSource is one tensor of each batch: the array it reads relative to
// each image, and how.
type boxSource struct {
	Name     string `json:"name"`
	Path     string `json:"path"`                // relative to each image: "" for the image itself, labels/NAME
	Dtype    string `json:"dtype"`               // output dtype
	Axes     []int  `json:"axes"`                // the image axes it reads (a box's ranges along them), in its order
	DataType string `json:"data_type,omitempty"` // a label image's zarr data type (the image's are data_types)
}

// boxSample is one sample: an index into Arrays and a half-open box.
type boxSample struct {
	Array int        `json:"array"`
	Box   [][2]int64 `json:"box"`
}

// boxSeedStream separates the box RNG's stream from other uses of a seed.
const boxSeedStream = 0x6461_6d61_6379_0001

// drawBoxes draws the scenario's samples (its warm-up and measured
// batches): for each, an array and an in-bounds origin, uniformly at
// random from the run's seed.
func drawBoxes(sc *Scenario) []boxSample {
	r := newBoxRand(sc)
	n := (sc.Run.Warmup + sc.Run.Batches) * sc.Run.Config.BatchSize
	out := make([]boxSample, n)
	for i := range out {
		out[i] = drawBox(r, sc)
	}
	return out
}

// newBoxRand is the generator drawBoxes draws from; drawing on past its
// samples gives the boxes of a --duration run.
func newBoxRand(sc *Scenario) *rand.Rand { return rand.New(rand.NewPCG(sc.Run.Seed, boxSeedStream)) }

// drawBox draws one sample from r.
func drawBox(r *rand.Rand, sc *Scenario) boxSample {
	s := boxSample{Array: r.IntN(sc.Dataset.Arrays), Box: make([][2]int64, len(sc.Run.Config.SampleShape))}
	for d, ext := range sc.Run.shape() {
		o := r.Int64N(sc.Dataset.Shape[d] - ext + 1)
		s.Box[d] = [2]int64{o, o + ext}
	}
	return s
}

// uniformStream is the uniform sampler's draws (drawBox) from the first.
func uniformStream(sc *Scenario) func() func() (boxSample, bool) {
	return func() func() (boxSample, bool) {
		r := newBoxRand(sc)
		return func() (boxSample, bool) { return drawBox(r, sc), false }
	}
}

// foregroundStream is the draws of package sampler's foreground sampler
// over the dataset from the first: run.sampler.fraction of the boxes
// centred on a voxel of the label's coarsest level that is not 0, the
// others uniform, each array weighted by its volume, all from the run's
// seed.
func foregroundStream(ctx context.Context, sc *Scenario, bs *boxSet) (func() func() (boxSample, bool), error) {
	d := &sc.Dataset
	cfg := boxsampler.Config{
		Kind: boxsampler.Foreground, Box: sc.Run.shape(), Seed: sc.Run.Seed, Infinite: true,
		Fraction: sc.Run.Sampler.Fraction, LabelLevel: labelLevels(d.labelShape()) - 1,
	}
	for i := range d.Arrays {
		cfg.Arrays = append(cfg.Arrays, boxsampler.Array{URI: bs.uri(boxSample{Array: i}), Label: bs.sourceURI(i, "labels/"+d.Labels.Name)})
	}
	if bs.remote != nil {
		cfg.Open = bs.remote.opener.Open
	}
	s, err := boxsampler.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("run.sampler: %w", err)
	}
	return func() func() (boxSample, bool) {
		var i int64
		return func() (boxSample, bool) {
			dr, _ := s.At(0, i) // an infinite sampler has every index
			i++
			out := boxSample{Array: dr.Array, Box: make([][2]int64, len(dr.Box))}
			for k, r := range dr.Box {
				out.Box[k] = [2]int64{r.Start, r.Stop}
			}
			return out, dr.Foreground
		}
	}, nil
}

// draw draws the run's samples (its warm-up and measured batches) with
// run.sampler.
func (bs *boxSet) draw(ctx context.Context, sc *Scenario) error {
	if sc.Run.Sampler != nil && sc.Run.Sampler.Kind == "foreground" {
		st, err := foregroundStream(ctx, sc, bs)
		if err != nil {
			return err
		}
		bs.stream, bs.Sampler = st, "foreground"
	}
	next := bs.stream()
	warm := sc.Run.Warmup * sc.Run.Config.BatchSize
	bs.Samples = make([]boxSample, warm+sc.passSamples())
	bs.foreground = 0
	for i := range bs.Samples {
		if i == warm && sc.Run.chunked() {
			next = bs.stream() // the pass reads every chunk from the first
		}
		var fg bool
		bs.Samples[i], fg = next()
		if fg {
			bs.foreground++
		}
	}
	return nil
}

// newBoxSet describes the scenario's boxes over the dataset in dir, or
// over the remote dataset rd when it is not nil. Its samples are the
// given ones (draw draws the run's).
func newBoxSet(sc *Scenario, dir string, rd *remoteData, samples []boxSample) (*boxSet, error) {
	abs := ""
	if rd != nil {
		abs = rd.uri
	} else {
		var err error
		if abs, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
	}
	srcs := sc.sources()
	bs := &boxSet{
		Scenario: sc.Name, DatasetDir: abs, SampleShape: sc.Run.shape(),
		BatchSize: sc.Run.Config.BatchSize, Warmup: sc.Run.Warmup, Batches: sc.Run.Batches,
		Dtype: srcs[0].dtype.String(), Samples: samples, remote: rd,
		Sampler: "uniform", stream: uniformStream(sc),
	}
	if sc.Run.chunked() {
		bs.Sampler, bs.stream = BoxesChunks, chunkStream(sc)
	}
	bs.index = map[string]int{}
	for i := range sc.Dataset.Arrays {
		name := ArrayName(i)
		if ad := sc.array; ad != nil {
			name, bs.Level, bs.Plain = filepath.Base(ad.path), ad.level, !ad.image
		}
		bs.Arrays = append(bs.Arrays, name)
		bs.DataTypes = append(bs.DataTypes, sc.Dataset.Dtype.At(i))
		bs.index[bs.uri(boxSample{Array: i})] = i
	}
	for _, s := range srcs {
		b := boxSource{Name: s.name, Path: s.path(), Dtype: s.dtype.String(), Axes: s.axes}
		if s.label != "" {
			b.DataType = sc.Dataset.Labels.Dtype
		}
		bs.Sources = append(bs.Sources, b)
	}
	return bs, nil
}

func (bs *boxSet) write(path string) error {
	b, err := json.Marshal(bs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// uri is the pipeline URI of sample s: its image group.
func (bs *boxSet) uri(s boxSample) string {
	if bs.remote != nil {
		return bs.remote.join(bs.Arrays[s.Array])
	}
	return filepath.Join(bs.DatasetDir, bs.Arrays[s.Array])
}

// sourceURI is the URI of the array at rel (a source's path) relative to
// image i.
func (bs *boxSet) sourceURI(i int, rel string) string {
	if bs.remote != nil {
		return bs.remote.join(path.Join(bs.Arrays[i], rel))
	}
	return filepath.Join(bs.DatasetDir, bs.Arrays[i], rel)
}

// level opens the array read of image i, through the bench's own store
// when the dataset is remote.
func (bs *boxSet) level(i int) (*zarr.Array, error) { return bs.levelAt(i, "") }

// levelAt opens the array read at rel (a source's path) relative to
// image i.
func (bs *boxSet) levelAt(i int, rel string) (*zarr.Array, error) {
	if bs.Plain {
		return zarr.Open(filepath.Join(bs.DatasetDir, bs.Arrays[i], rel))
	}
	var m *zarr.Multiscale
	var err error
	if bs.remote != nil {
		m, err = zarr.OpenNGFFStore(bs.remote.store, bs.remote.key(path.Join(bs.Arrays[i], rel)))
	} else {
		m, err = zarr.OpenNGFF(filepath.Join(bs.DatasetDir, bs.Arrays[i], rel))
	}
	if err != nil {
		return nil, err
	}
	return m.Level(bs.Level)
}

// sample converts s to a pipeline sample.
func (bs *boxSet) sample(s boxSample) pipeline.Sample {
	box := make([]pipeline.Range, len(s.Box))
	for d, r := range s.Box {
		box[d] = pipeline.Range{Start: r[0], Stop: r[1]}
	}
	return pipeline.Sample{URI: bs.uri(s), Box: box, Level: bs.Level}
}

// boxBytes is the size of the boxes of samples, every source's, in
// their arrays' data types.
func (bs *boxSet) boxBytes(samples []pipeline.Sample) int64 {
	var n int64
	for _, s := range samples {
		for k := range bs.Sources {
			n += bs.sourceBytes(k, bs.index[s.URI], s.Box)
		}
	}
	return n
}

// sourceBytes is the size of source k's box of a sample of image i in its
// array's data type.
func (bs *boxSet) sourceBytes(k, i int, box []pipeline.Range) int64 {
	src := &bs.Sources[k]
	name := src.DataType
	if name == "" {
		name = bs.DataTypes[i]
	}
	dt, _ := zarr.ParseDataType(name)
	v := int64(dt.Size())
	for _, a := range src.Axes {
		v *= box[a].Stop - box[a].Start
	}
	return v
}

// project returns sample s as source k reads it alone, as the only
// source of a pipeline (the apart comparison's): the URI of the source's
// array beside the sample's image (a pipeline's first source reads the
// sample's URI itself), the box's ranges along the source's axes.
func (bs *boxSet) project(k int, s pipeline.Sample) pipeline.Sample {
	src := &bs.Sources[k]
	if src.Path == "" {
		return s
	}
	box := make([]pipeline.Range, len(src.Axes))
	for j, a := range src.Axes {
		box[j] = s.Box[a]
	}
	s.URI, s.Box = bs.sourceURI(bs.index[s.URI], src.Path), box
	return s
}
