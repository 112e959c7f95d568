package bench

import (
	"errors"
	"fmt"
	"github.com/damacy-go/damacy/pipeline"
	"path/filepath"
	"slices"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/zarr"
)

// arrayData is the existing array or OME-NGFF image a scenario made by
// ArrayScenario reads as it is: nothing is generated.
type arrayData struct {
	path  string // the array's or image's directory, absolute
	image bool   // an OME-NGFF image, whose level Level is read (else an array)
	level int
}

// IsArray reports whether path is a local directory holding a zarr array
// or an OME-NGFF image, which damacy bench reads as it is.
func IsArray(path string) bool {
	k, err := zarr.Inspect(path)
	return err == nil && (k == zarr.NodeArray || k == zarr.NodeMultiscale)
}

// ArrayScenario makes a scenario that reads the zarr array, or level
// level of the OME-NGFF image, in the local directory path as it is, with
// the default pipeline configuration, f32 out: every chunk once, 4 per
// batch, no warm-up (Override changes that). Its dataset section
// describes the array; nothing is generated.
func ArrayScenario(path string, level int) (*Scenario, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	kind, err := zarr.Inspect(abs)
	if err != nil {
		return nil, err
	}
	ad := &arrayData{path: abs, level: level}
	var a *zarr.Array
	switch kind {
	case zarr.NodeArray:
		if level != 0 {
			return nil, fmt.Errorf("--level %d: %s is an array, not an OME-NGFF image", level, path)
		}
		a, err = zarr.Open(abs)
	case zarr.NodeMultiscale:
		ad.image = true
		var m *zarr.Multiscale
		if m, err = zarr.OpenNGFF(abs); err == nil {
			a, err = m.Level(level)
		}
	default:
		return nil, fmt.Errorf("%s: a zarr group without OME-NGFF multiscales; name one of its arrays or images", path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := zarr.ParseDataType(a.DataType().String()); err != nil {
		return nil, fmt.Errorf("%s: data type %v: %w", path, a.DataType(), err)
	}
	d := DatasetSpec{
		Dir:    filepath.Dir(abs),
		Arrays: 1,
		Shape:  a.Shape(),
		Chunk:  a.ChunkShape(),
		Dtype:  NameList{a.DataType().String()},
		Codec:  NameList{a.Codec().String()},
	}
	if shard := a.ShardShape(); !slices.Equal(shard, d.Chunk) {
		d.Shard = shard
	}
	what := "array"
	if ad.image {
		what = fmt.Sprintf("OME-NGFF image, level %d", level)
	}
	chunks := "chunks " + base.Shape(d.Chunk)
	if d.Shard != nil {
		chunks += " in shards " + base.Shape(d.Shard)
	}
	sc := &Scenario{
		Name:        filepath.Base(abs),
		Description: fmt.Sprintf("%s (%s): %s %s, %s, %s", abs, what, base.Shape(d.Shape), d.Dtype[0], chunks, a.Codec()),
		Dataset:     d,
		Run:         RunSpec{Config: pipeline.Config{BatchSize: 4, Dtype: pipeline.F32}, Boxes: BoxesChunks, Engine: "auto", Seed: 1},
		array:       ad,
	}
	if err := sc.revalidate(); err != nil {
		return nil, err
	}
	return sc, nil
}

// revalidate checks the scenario again after a change of its run: all of
// it, or the run alone for a scenario over an existing array.
func (sc *Scenario) revalidate() error {
	if sc.array != nil {
		err := sc.Run.validate(&sc.Dataset)
		var se *ScenarioError
		if errors.As(err, &se) {
			se.File = sc.array.path
		}
		return err
	}
	return sc.validate()
}
