package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/writer"
)

func fieldErr(field, format string, args ...any) error {
	return &ScenarioError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// validate checks every field; the first bad one is returned as a
// *ScenarioError.
func (sc *Scenario) validate() error {
	if sc.Name == "" {
		return fieldErr("name", "missing")
	}
	if !validName(sc.Name) {
		return fieldErr("name", "%q: use letters, digits, '-', '_' and '.' only", sc.Name)
	}
	if err := sc.Dataset.Validate(); err != nil {
		return err
	}
	return sc.Run.validate(&sc.Dataset)
}

func checkShape(field string, s []int64, rank int) error {
	if rank == 0 && (len(s) < 2 || len(s) > 5) {
		return fieldErr(field, "rank %d: want 2 to 5 axes (OME-NGFF)", len(s))
	}
	if rank > 0 && len(s) != rank {
		return fieldErr(field, "has %d axes; dataset.shape has %d", len(s), rank)
	}
	for i, n := range s {
		if n <= 0 {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%d: must be positive", n)
		}
	}
	return nil
}

// Validate checks every field of the dataset; the first bad one is
// returned as a *ScenarioError.
func (d *DatasetSpec) Validate() error {
	if d.Arrays < 1 || d.Arrays > 100000 {
		return fieldErr("dataset.arrays", "%d: must be in 1..100000", d.Arrays)
	}
	if err := checkShape("dataset.shape", d.Shape, 0); err != nil {
		return err
	}
	if err := checkShape("dataset.chunk", d.Chunk, len(d.Shape)); err != nil {
		return err
	}
	if d.Shard != nil {
		if err := checkShape("dataset.shard", d.Shard, len(d.Shape)); err != nil {
			return err
		}
		for i := range d.Shard {
			if d.Shard[i]%d.Chunk[i] != 0 {
				return fieldErr(fmt.Sprintf("dataset.shard[%d]", i), "%d is not a multiple of dataset.chunk[%d] = %d", d.Shard[i], i, d.Chunk[i])
			}
		}
	}
	if len(d.Dtype) == 0 {
		return fieldErr("dataset.dtype", "missing")
	}
	for i, name := range d.Dtype {
		if _, err := zarr.ParseDataType(name); err != nil {
			return fieldErr(listField("dataset.dtype", d.Dtype, i), "%q is not a supported zarr data type", name)
		}
	}
	if len(d.Codec) == 0 {
		return fieldErr("dataset.codec", "missing")
	}
	for i := range d.Codec {
		if _, err := d.compression(i); err != nil {
			return err
		}
	}
	chunkBytes := int64(8)
	for _, n := range d.Chunk {
		chunkBytes *= n
		if chunkBytes > 1<<30 {
			return fieldErr("dataset.chunk", "chunks of more than 1 GiB")
		}
	}
	if d.Entropy < 0 || d.Entropy > 1 || math.IsNaN(d.Entropy) {
		return fieldErr("dataset.entropy", "%v: must be in [0, 1]", d.Entropy)
	}
	switch d.Values {
	case "":
	case ValuesZarrBenchmarks:
		switch {
		case len(d.Dtype) != 1 || d.Dtype[0] != "uint16":
			return fieldErr("dataset.dtype", "%v: the zarr_benchmarks values are uint16", d.Dtype)
		case len(d.Shape) != 3:
			return fieldErr("dataset.shape", "rank %d: the zarr_benchmarks values are of rank 3 (z, y, x)", len(d.Shape))
		case d.Entropy != 0:
			return fieldErr("dataset.entropy", "%v: applies to damacy's generator, not to dataset.values %s", d.Entropy, d.Values)
		case d.Labels != nil:
			return fieldErr("dataset.labels", "not with dataset.values %s", d.Values)
		}
	default:
		return fieldErr("dataset.values", "%q: want zarr_benchmarks, or omit it for damacy's generator (dataset.entropy)", d.Values)
	}
	for i := range d.Arrays {
		if _, err := d.arraySpec(i); err != nil {
			return err
		}
	}
	if d.Labels != nil {
		return d.validateLabels()
	}
	return nil
}

func listField(field string, l NameList, i int) string {
	if len(l) == 1 {
		return field
	}
	return fmt.Sprintf("%s[%d]", field, i)
}

// CodecNames lists the values dataset.codec accepts.
func CodecNames() []string {
	return []string{"none", "zstd", "gzip", "lz4", "blosc-zstd", "blosc-lz4", "blosc-lz4hc", "blosc-blosclz", "blosc-zlib"}
}

// compression is the writer's compression for the codec of array i (the
// list cycled), or an error naming the field.
func (d *DatasetSpec) compression(i int) (writer.Compression, error) {
	k := i % len(d.Codec)
	anyBlosc := slices.ContainsFunc(d.Codec, func(s string) bool { return strings.HasPrefix(s, "blosc-") })
	return compressionOf(listField("dataset.codec", d.Codec, k), "dataset.level", d.Codec[k], d.Level, d.Shuffle, anyBlosc)
}

// compressionOf is the writer's compression for codec name at level with
// blosc's shuffle, or an error naming field (the codec's), levelField or
// dataset.shuffle (which may be set when anyBlosc: some array's codec is
// a blosc one).
func compressionOf(field, levelField, name string, level int, shuffle string, anyBlosc bool) (writer.Compression, error) {
	var c writer.Compression
	switch name {
	case "none":
		c.Codec = writer.NoCompression
	case "zstd":
		c.Codec = writer.Zstd
	case "gzip":
		c.Codec = writer.Gzip
	case "lz4":
		c.Codec = writer.LZ4
	default:
		inner, ok := strings.CutPrefix(name, "blosc-")
		if !ok {
			return c, fieldErr(field, "%q is not a codec (want one of %s)", name, strings.Join(CodecNames(), ", "))
		}
		bc, err := blosc.ParseCompressor(inner)
		if err != nil || inner == "snappy" {
			return c, fieldErr(field, "%q is not a codec (want one of %s)", name, strings.Join(CodecNames(), ", "))
		}
		c.Codec, c.BloscCompressor = writer.Blosc, bc
		switch shuffle {
		case "", "byte":
			c.Shuffle = blosc.ByteShuffle
		case "bit":
			c.Shuffle = blosc.BitShuffle
		case "none":
			c.Shuffle = blosc.NoShuffle
		default:
			return c, fieldErr("dataset.shuffle", "%q: want none, byte or bit", shuffle)
		}
	}
	if c.Codec != writer.Blosc && shuffle != "" && !anyBlosc {
		return c, fieldErr("dataset.shuffle", "applies to blosc codecs only (dataset.codec is %q)", name)
	}
	c.Level = level
	lo, hi := 0, 9
	switch c.Codec {
	case writer.Zstd:
		lo, hi = -131072, 22
	case writer.LZ4:
		lo, hi = 0, 1<<16
	case writer.NoCompression:
		lo, hi = math.MinInt, math.MaxInt
	}
	if c.Level < lo || c.Level > hi {
		return c, fieldErr(levelField, "%d: out of range for %s (%d..%d)", c.Level, name, lo, hi)
	}
	if c.Codec == writer.NoCompression {
		c.Level = 0
	}
	if c.Codec == writer.LZ4 && c.Level == 0 {
		c.Level = 1
	}
	return c, nil
}

// ArrayName is the name of image i in the dataset directory.
func ArrayName(i int) string { return fmt.Sprintf("a%03d", i) }

// arraySpec is the NGFF spec of image i. The writer validates it again
// when the image is created; specFieldError names the scenario field then.
func (d *DatasetSpec) arraySpec(i int) (writer.NGFFSpec, error) {
	dt, err := zarr.ParseDataType(d.Dtype.At(i))
	if err != nil {
		return writer.NGFFSpec{}, fieldErr(listField("dataset.dtype", d.Dtype, i%len(d.Dtype)), "%v", err)
	}
	comp, err := d.compression(i)
	if err != nil {
		return writer.NGFFSpec{}, err
	}
	spec := writer.NGFFSpec{
		Name: ArrayName(i),
		Axes: ngffAxes(len(d.Shape)),
		Array: writer.Spec{
			Shape:       d.Shape,
			ChunkShape:  d.Chunk,
			ShardShape:  d.Shard,
			DataType:    dt,
			Compression: comp,
		},
	}
	return spec, nil
}

// specFieldError maps a writer *SpecError to the scenario field that set
// the writer field at fault.
func specFieldError(err error) error {
	var se *writer.SpecError
	if !errors.As(err, &se) {
		return fieldErr("dataset", "%v", err)
	}
	f := strings.Replace(se.Field, "NGFFSpec.Array.", "Spec.", 1)
	for _, m := range []struct{ writer, scenario string }{
		{"Spec.ChunkShape", "dataset.chunk"},
		{"Spec.ShardShape", "dataset.shard"},
		{"Spec.Shape", "dataset.shape"},
		{"Spec.DataType", "dataset.dtype"},
		{"Spec.Compression.Level", "dataset.level"},
		{"Spec.Compression.Shuffle", "dataset.shuffle"},
		{"Spec.Compression", "dataset.codec"},
	} {
		if strings.HasPrefix(f, m.writer) {
			return fieldErr(m.scenario, "%s", se.Reason)
		}
	}
	return fieldErr("dataset", "%v", err)
}

// ngffAxes names the axes of an image of the given rank: the last two or
// three are space axes (z, y, x), then c and t.
func ngffAxes(rank int) []writer.Axis {
	all := []writer.Axis{
		{Name: "t", Type: "time"},
		{Name: "c", Type: "channel"},
		{Name: "z", Type: "space"},
		{Name: "y", Type: "space"},
		{Name: "x", Type: "space"},
	}
	return all[len(all)-rank:]
}

func (r *RunSpec) validate(d *DatasetSpec) error {
	// run.config's ranges are the pipeline's to check (pipeline.New); here
	// only what the bench needs and what depends on the dataset.
	if r.Config.BatchSize < 1 {
		return fieldErr("run.config.batch_size", "%d: must be positive (the bench draws batch_size boxes a batch)", r.Config.BatchSize)
	}
	if err := r.validateBoxes(d); err != nil {
		return err
	}
	if err := checkShape("run.config.sample_shape", r.shape(), len(d.Shape)); err != nil {
		return err
	}
	for i, n := range r.shape() {
		if n > d.Shape[i] && !r.chunked() { // a chunk may be larger than its array
			return fieldErr(fmt.Sprintf("run.config.sample_shape[%d]", i), "%d is larger than dataset.shape[%d] = %d (boxes are drawn inside the arrays)", n, i, d.Shape[i])
		}
	}
	if r.Batches < 1 {
		return fieldErr("run.batches", "%d: must be at least 1", r.Batches)
	}
	if r.Warmup < 0 {
		return fieldErr("run.warmup", "%d: must not be negative", r.Warmup)
	}
	if err := r.validateSources(d); err != nil {
		return err
	}
	if r.Epochs < 0 || r.Epochs > 1000 {
		return fieldErr("run.epochs", "%d: must be in 0..1000", r.Epochs)
	}
	if r.HoldMS < 0 || r.HoldMS > 600000 {
		return fieldErr("run.hold_ms", "%d: must be in 0..600000", r.HoldMS)
	}
	if _, err := base.EngineDevice(r.Engine); err != nil {
		return fieldErr("run.engine", "%v", err)
	}
	return nil
}

// dataKey is a digest of the dataset's parameters (not its directory):
// datasets with the same key hold the same bytes.
func (d *DatasetSpec) dataKey() string {
	c := *d
	c.Dir = ""
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// dataDir is where the scenario's dataset lives: override if set, else
// dataset.dir (relative to the scenario file), else a directory under the
// system temp dir named after the dataset's parameters.
func (sc *Scenario) dataDir(override string) string {
	switch {
	case override != "":
		return override
	case remote.IsURI(sc.Dataset.Dir):
		return sc.Dataset.Dir
	case sc.Dataset.Dir != "" && filepath.IsAbs(sc.Dataset.Dir):
		return sc.Dataset.Dir
	case sc.Dataset.Dir != "":
		return filepath.Join(sc.base, sc.Dataset.Dir)
	}
	return filepath.Join(os.TempDir(), "damacy-data", sc.Name+"-"+sc.Dataset.dataKey())
}
