package bench

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

// boxSet is the boxes a benchmark reads, as --boxes-out writes them for
// peers (cmd/damacy/peers) to read the same boxes.
type boxSet struct {
	Scenario    string      `json:"scenario"`
	DatasetDir  string      `json:"dataset_dir"` // absolute path, or the remote dataset's URI
	Arrays      []string    `json:"arrays"`      // image group paths, relative to dataset_dir
	Level       int         `json:"level"`       // the multiscale level read (its array is <image>/<level>)
	DataTypes   []string    `json:"data_types"`  // per array
	SampleShape []int64     `json:"sample_shape"`
	BatchSize   int         `json:"batch_size"`
	Warmup      int         `json:"warmup"`  // batches
	Batches     int         `json:"batches"` // measured batches
	Dtype       string      `json:"dtype"`   // output dtype: "float32" or "bfloat16"
	Samples     []boxSample `json:"samples"` // (warmup + batches) * batch_size, warmup first

	elemSize map[string]int64 // per array URI, its element size (boxBytes)
	remote   *remoteData      // the dataset when it is not a local directory
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
	n := (sc.Run.Warmup + sc.Run.Batches) * sc.Run.BatchSize
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
	s := boxSample{Array: r.IntN(sc.Dataset.Arrays), Box: make([][2]int64, len(sc.Run.SampleShape))}
	for d, ext := range sc.Run.SampleShape {
		o := r.Int64N(sc.Dataset.Shape[d] - ext + 1)
		s.Box[d] = [2]int64{o, o + ext}
	}
	return s
}

// newBoxSet describes the scenario's boxes over the dataset in dir, or
// over the remote dataset rd when it is not nil.
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
	dt, _ := pipeline.ParseDtype(sc.Run.Dtype)
	bs := &boxSet{
		Scenario: sc.Name, DatasetDir: abs, SampleShape: sc.Run.SampleShape,
		BatchSize: sc.Run.BatchSize, Warmup: sc.Run.Warmup, Batches: sc.Run.Batches,
		Dtype: dt.String(), Samples: samples, remote: rd,
	}
	for i := range sc.Dataset.Arrays {
		bs.Arrays = append(bs.Arrays, ArrayName(i))
		bs.DataTypes = append(bs.DataTypes, sc.Dataset.Dtype.At(i))
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

// level opens the array read of image i, through the bench's own store
// when the dataset is remote.
func (bs *boxSet) level(i int) (*zarr.Array, error) {
	var m *zarr.Multiscale
	var err error
	if bs.remote != nil {
		m, err = zarr.OpenNGFFStore(bs.remote.store, bs.remote.key(bs.Arrays[i]))
	} else {
		m, err = zarr.OpenNGFF(filepath.Join(bs.DatasetDir, bs.Arrays[i]))
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

// boxBytes is the size of the boxes of samples in their arrays' data
// types.
func (bs *boxSet) boxBytes(samples []pipeline.Sample) int64 {
	if bs.elemSize == nil {
		bs.elemSize = map[string]int64{}
		for i := range bs.Arrays {
			dt, _ := zarr.ParseDataType(bs.DataTypes[i])
			bs.elemSize[bs.uri(boxSample{Array: i})] = int64(dt.Size())
		}
	}
	var n int64
	for _, s := range samples {
		v := bs.elemSize[s.URI]
		for _, r := range s.Box {
			v *= r.Stop - r.Start
		}
		n += v
	}
	return n
}
