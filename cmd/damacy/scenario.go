package main

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/blosc"
	"github.com/damacy-go/damacy/zarr/writer"
)

//go:embed scenarios/*.json
var builtinScenarios embed.FS

// scenarioHelp documents the scenario file format (damacy help bench).
const scenarioHelp = `A scenario file is a JSON object with two sections. Unknown fields are
errors, and every value is checked; a message names the field at fault.

  {
    "name": "throughput",            short name (letters, digits, - _ .)
    "description": "...",            optional free text
    "dataset": {
      "dir": "",                     where the dataset lives; relative to the
                                     scenario file; empty: a directory under
                                     the system temp dir named after the
                                     dataset's parameters (--data overrides)
      "arrays": 16,                  number of OME-NGFF images a000, a001, ...
      "shape": [512, 512, 512],      each image's level-0 shape, rank 2..5
      "chunk": [32, 64, 64],         inner chunk shape
      "shard": [256, 256, 512],      shard shape (a multiple of chunk);
                                     omit for unsharded arrays
      "dtype": "uint16",             a zarr data type, or a list cycled
                                     over the arrays: ["uint8", "uint16"]
      "codec": "zstd",               none, zstd, gzip, lz4, blosc-zstd,
                                     blosc-lz4, blosc-lz4hc, blosc-blosclz,
                                     blosc-zlib; or a list cycled over arrays
      "level": 3,                    the codec's compression level
                                     (0: the codec's default)
      "shuffle": "byte",             blosc only: none, byte (default), bit
      "entropy": 0.5,                fraction of voxels drawn uniformly at
                                     random; the others are 0 (damacy's
                                     generator)
      "seed": 1                      data seed: same seed, same bytes
    },
    "run": {
      "batch_size": 128,             samples per batch
      "sample_shape": [128,128,128], box extent per axis
      "batches": 100,                measured batches
      "warmup": 10,                  batches popped before the stats reset
      "dtype": "f32",                output: f32 or bf16
      "lookahead_batches": 4,        batches planned ahead (2..64); damacy's
                                     lookahead of 512 samples at 128 per
                                     batch is 4
      "io_threads": 16,              concurrent readers (0: the default)
      "gpu_cap": "6GiB",             device memory cap (bytes or a string
                                     with B, KiB, MiB, GiB, KB, MB, GB);
                                     0: none
      "host_buffer": "1GiB",         staging memory (0: the default)
      "device_buffer": "1GiB",       decoded-chunk memory (0: the default)
      "hold_ms": 0,                  consumer hold between pop and release
      "engine": "auto",              auto, host, cuda or cuda:N
      "seed": 1                      box seed: same seed, same boxes
    }
  }

Boxes: each sample's array and its in-bounds origin are drawn uniformly at
random from the box seed, so the same seed reads the same boxes.`

// Scenario is a benchmark scenario: a synthetic dataset and how to read it.
type Scenario struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Dataset     DatasetSpec `json:"dataset"`
	Run         RunSpec     `json:"run"`

	// base is the directory a relative Dataset.Dir is resolved against:
	// the scenario file's directory, or "" for built-in scenarios.
	base string
}

// DatasetSpec describes a synthetic dataset of OME-NGFF 0.5 images over
// sharded zarr v3 arrays.
type DatasetSpec struct {
	Dir     string   `json:"dir,omitempty"`
	Arrays  int      `json:"arrays"`
	Shape   []int64  `json:"shape"`
	Chunk   []int64  `json:"chunk"`
	Shard   []int64  `json:"shard,omitempty"`
	Dtype   nameList `json:"dtype"`
	Codec   nameList `json:"codec"`
	Level   int      `json:"level,omitempty"`
	Shuffle string   `json:"shuffle,omitempty"`
	Entropy float64  `json:"entropy"`
	Seed    uint64   `json:"seed"`
}

// RunSpec says how a benchmark reads the dataset.
type RunSpec struct {
	BatchSize    int      `json:"batch_size"`
	SampleShape  []int64  `json:"sample_shape"`
	Batches      int      `json:"batches"`
	Warmup       int      `json:"warmup"`
	Dtype        string   `json:"dtype"`
	Lookahead    int      `json:"lookahead_batches,omitempty"`
	IOThreads    int      `json:"io_threads,omitempty"`
	GPUCap       byteSize `json:"gpu_cap,omitempty"`
	HostBuffer   byteSize `json:"host_buffer,omitempty"`
	DeviceBuffer byteSize `json:"device_buffer,omitempty"`
	HoldMS       int      `json:"hold_ms,omitempty"`
	Engine       string   `json:"engine,omitempty"`
	Seed         uint64   `json:"seed"`
}

// nameList is a JSON string or a list of strings; a single name is a list
// of one.
type nameList []string

func (l *nameList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = nameList{s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*l = list
	return nil
}

func (l nameList) MarshalJSON() ([]byte, error) {
	if len(l) == 1 {
		return json.Marshal(l[0])
	}
	return json.Marshal([]string(l))
}

// at returns the name for array i: the list cycled.
func (l nameList) at(i int) string { return l[i%len(l)] }

// byteSize is a size in bytes, written in JSON as a number or as a string
// with a unit ("6GiB", "512MiB", "1.5GB").
type byteSize int64

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

func parseByteSize(s string) (byteSize, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number with B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	return byteSize(math.Round(v * mult)), nil
}

func (b *byteSize) UnmarshalJSON(data []byte) error {
	var n json.Number
	if err := json.Unmarshal(data, &n); err == nil {
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%s is not a byte count (want a non-negative integer)", n)
		}
		*b = byteSize(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("want a byte count or a string such as \"6GiB\"")
	}
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func (b byteSize) String() string { return formatBytes(int64(b)) }

// scenarioError is a scenario file that cannot be used: the file and the
// field at fault (a JSON path such as "dataset.chunk[1]").
type scenarioError struct {
	File  string
	Field string
	Msg   string
}

func (e *scenarioError) Error() string {
	msg := e.Msg
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.File != "" {
		msg = e.File + ": " + msg
	}
	return msg
}

// loadScenario reads a scenario from a file or, when no file of that name
// exists and it is a bare name, from the built-in scenarios. The result is
// validated.
func loadScenario(name string) (*Scenario, error) {
	if fi, err := os.Stat(name); (err != nil || fi.IsDir()) && !strings.ContainsAny(name, `/\`) {
		bare := strings.TrimSuffix(name, ".json")
		b, berr := builtinScenarios.ReadFile(path.Join("scenarios", bare+".json"))
		if berr == nil {
			return parseScenario(bare, b)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: no such file, and not a built-in scenario (%s)", name, strings.Join(builtinNames(), ", "))
		}
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	sc, err := parseScenario(name, b)
	if err != nil {
		return nil, err
	}
	sc.base = filepath.Dir(name)
	return sc, nil
}

// builtinNames lists the built-in scenarios.
func builtinNames() []string {
	ents, _ := builtinScenarios.ReadDir("scenarios")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

// parseScenario decodes and validates a scenario document. file names it
// in errors.
func parseScenario(file string, b []byte) (*Scenario, error) {
	var top struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Dataset     json.RawMessage `json:"dataset"`
		Run         json.RawMessage `json:"run"`
	}
	if err := strictDecode(b, &top); err != nil {
		return nil, jsonFieldError(file, "", b, err)
	}
	sc := &Scenario{Name: top.Name, Description: top.Description}
	if top.Dataset == nil {
		return nil, &scenarioError{file, "dataset", "missing"}
	}
	if top.Run == nil {
		return nil, &scenarioError{file, "run", "missing"}
	}
	if err := strictDecode(top.Dataset, &sc.Dataset); err != nil {
		return nil, jsonFieldError(file, "dataset", top.Dataset, err)
	}
	if err := strictDecode(top.Run, &sc.Run); err != nil {
		return nil, jsonFieldError(file, "run", top.Run, err)
	}
	if err := sc.validate(); err != nil {
		var se *scenarioError
		if errors.As(err, &se) {
			se.File = file
		}
		return nil, err
	}
	return sc, nil
}

// strictDecode decodes one JSON value into v, refusing unknown fields and
// trailing data.
func strictDecode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// jsonFieldError turns a decoding error of section (a JSON path prefix)
// into a one-line *scenarioError naming the field.
func jsonFieldError(file, section string, b []byte, err error) error {
	join := func(f string) string {
		if section == "" {
			return f
		}
		if f == "" {
			return section
		}
		return section + "." + f
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := lineCol(b, syn.Offset)
		return &scenarioError{file, section, fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, strings.TrimPrefix(syn.Error(), "json: "))}
	case errors.As(err, &typ):
		return &scenarioError{file, join(typ.Field), fmt.Sprintf("cannot use a JSON %s here (want %s)", typ.Value, jsonKind(typ.Type.String()))}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return &scenarioError{file, section, "truncated JSON"}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		name, _ := strconv.Unquote(f)
		return &scenarioError{file, join(name), "unknown field"}
	}
	// Errors from UnmarshalJSON methods name no field; find it by decoding
	// the section's fields one at a time.
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) == nil {
		for k := range fields {
			if ferr := probeField(section, k, fields[k]); ferr != nil {
				return &scenarioError{file, join(k), ferr.Error()}
			}
		}
	}
	return &scenarioError{file, section, msg}
}

// probeField decodes one field of a section into its Go type, to find
// which field a custom decoder rejected.
func probeField(section, key string, raw json.RawMessage) error {
	var v any
	switch section + "." + key {
	case "dataset.dtype", "dataset.codec":
		v = new(nameList)
	case "run.gpu_cap", "run.host_buffer", "run.device_buffer":
		v = new(byteSize)
	default:
		return nil
	}
	return json.Unmarshal(raw, v)
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	}
	return "an object"
}

func lineCol(b []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(b)))
	line = 1 + bytes.Count(b[:off], []byte("\n"))
	col = int(off) - bytes.LastIndexByte(b[:off], '\n')
	return line, col
}

func fieldErr(field, format string, args ...any) error {
	return &scenarioError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// validate checks every field; the first bad one is returned as a
// *scenarioError.
func (sc *Scenario) validate() error {
	if sc.Name == "" {
		return fieldErr("name", "missing")
	}
	if strings.IndexFunc(sc.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return fieldErr("name", "%q: use letters, digits, '-', '_' and '.' only", sc.Name)
	}
	if err := sc.Dataset.validate(); err != nil {
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

func (d *DatasetSpec) validate() error {
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
	for i := range d.Arrays {
		if _, err := d.arraySpec(i); err != nil {
			return err
		}
	}
	return nil
}

func listField(field string, l nameList, i int) string {
	if len(l) == 1 {
		return field
	}
	return fmt.Sprintf("%s[%d]", field, i)
}

// codecNames lists the values dataset.codec accepts.
var codecNames = []string{"none", "zstd", "gzip", "lz4", "blosc-zstd", "blosc-lz4", "blosc-lz4hc", "blosc-blosclz", "blosc-zlib"}

// compression is the writer's compression for the codec of array i (the
// list cycled), or an error naming the field.
func (d *DatasetSpec) compression(i int) (writer.Compression, error) {
	k := i % len(d.Codec)
	field := listField("dataset.codec", d.Codec, k)
	name := d.Codec[k]
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
			return c, fieldErr(field, "%q is not a codec (want one of %s)", name, strings.Join(codecNames, ", "))
		}
		bc, err := blosc.ParseCompressor(inner)
		if err != nil || inner == "snappy" {
			return c, fieldErr(field, "%q is not a codec (want one of %s)", name, strings.Join(codecNames, ", "))
		}
		c.Codec, c.BloscCompressor = writer.Blosc, bc
		switch d.Shuffle {
		case "", "byte":
			c.Shuffle = blosc.ByteShuffle
		case "bit":
			c.Shuffle = blosc.BitShuffle
		case "none":
			c.Shuffle = blosc.NoShuffle
		default:
			return c, fieldErr("dataset.shuffle", "%q: want none, byte or bit", d.Shuffle)
		}
	}
	if c.Codec != writer.Blosc && d.Shuffle != "" && !slices.ContainsFunc(d.Codec, func(s string) bool { return strings.HasPrefix(s, "blosc-") }) {
		return c, fieldErr("dataset.shuffle", "applies to blosc codecs only (dataset.codec is %q)", name)
	}
	c.Level = d.Level
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
		return c, fieldErr("dataset.level", "%d: out of range for %s (%d..%d)", c.Level, name, lo, hi)
	}
	if c.Codec == writer.NoCompression {
		c.Level = 0
	}
	if c.Codec == writer.LZ4 && c.Level == 0 {
		c.Level = 1
	}
	return c, nil
}

// arrayName is the name of image i in the dataset directory.
func arrayName(i int) string { return fmt.Sprintf("a%03d", i) }

// arraySpec is the NGFF spec of image i. The writer validates it again
// when the image is created; specFieldError names the scenario field then.
func (d *DatasetSpec) arraySpec(i int) (writer.NGFFSpec, error) {
	dt, err := zarr.ParseDataType(d.Dtype.at(i))
	if err != nil {
		return writer.NGFFSpec{}, fieldErr(listField("dataset.dtype", d.Dtype, i%len(d.Dtype)), "%v", err)
	}
	comp, err := d.compression(i)
	if err != nil {
		return writer.NGFFSpec{}, err
	}
	spec := writer.NGFFSpec{
		Name: arrayName(i),
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
	if r.BatchSize < 1 || r.BatchSize > 1<<20 {
		return fieldErr("run.batch_size", "%d: must be in 1..1048576", r.BatchSize)
	}
	if err := checkShape("run.sample_shape", r.SampleShape, len(d.Shape)); err != nil {
		return err
	}
	for i, n := range r.SampleShape {
		if n > d.Shape[i] {
			return fieldErr(fmt.Sprintf("run.sample_shape[%d]", i), "%d is larger than dataset.shape[%d] = %d (boxes are drawn inside the arrays)", n, i, d.Shape[i])
		}
	}
	if r.Batches < 1 {
		return fieldErr("run.batches", "%d: must be at least 1", r.Batches)
	}
	if r.Warmup < 0 {
		return fieldErr("run.warmup", "%d: must not be negative", r.Warmup)
	}
	if r.Dtype == "" {
		return fieldErr("run.dtype", "missing (want f32 or bf16)")
	}
	if _, err := pipeline.ParseDtype(r.Dtype); err != nil {
		return fieldErr("run.dtype", "%q: want f32 or bf16", r.Dtype)
	}
	if r.Lookahead != 0 && (r.Lookahead < 2 || r.Lookahead > 64) {
		return fieldErr("run.lookahead_batches", "%d: must be in 2..64 (0: the default)", r.Lookahead)
	}
	if r.IOThreads < 0 || r.IOThreads > 1024 {
		return fieldErr("run.io_threads", "%d: must be in 0..1024", r.IOThreads)
	}
	if r.HostBuffer != 0 && r.HostBuffer < 1<<20 {
		return fieldErr("run.host_buffer", "%v: must be at least 1 MiB (0: the default)", r.HostBuffer)
	}
	if r.DeviceBuffer != 0 && r.DeviceBuffer < 1<<20 {
		return fieldErr("run.device_buffer", "%v: must be at least 1 MiB (0: the default)", r.DeviceBuffer)
	}
	if r.HoldMS < 0 || r.HoldMS > 600000 {
		return fieldErr("run.hold_ms", "%d: must be in 0..600000", r.HoldMS)
	}
	if _, err := engineDevice(r.Engine); err != nil {
		return fieldErr("run.engine", "%v", err)
	}
	return nil
}

// engineDevice maps an engine name to pipeline.Config.Device.
func engineDevice(engine string) (string, error) {
	switch engine {
	case "", "auto":
		return "", nil
	case "host", "cpu":
		return "cpu", nil
	case "cuda", "gpu":
		return "cuda", nil
	}
	if rest, ok := strings.CutPrefix(engine, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return engine, nil
		}
	}
	return "", fmt.Errorf("%q: want auto, host, cuda or cuda:N", engine)
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
	case sc.Dataset.Dir != "" && filepath.IsAbs(sc.Dataset.Dir):
		return sc.Dataset.Dir
	case sc.Dataset.Dir != "":
		return filepath.Join(sc.base, sc.Dataset.Dir)
	}
	return filepath.Join(os.TempDir(), "damacy-data", sc.Name+"-"+sc.Dataset.dataKey())
}
