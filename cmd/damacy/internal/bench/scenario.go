package bench

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/pipeline"
)

//go:embed scenarios/*.json
var builtinScenarios embed.FS

// Scenario is a benchmark scenario: a synthetic dataset and how to read it.
type Scenario struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Dataset     DatasetSpec `json:"dataset"`
	Run         RunSpec     `json:"run"`

	// base is the directory a relative Dataset.Dir is resolved against:
	// the scenario file's directory, or "" for built-in scenarios.
	base string
	// array, when set, is the existing array the scenario reads
	// (ArrayScenario); its Dataset describes it.
	array *arrayData
}

// DatasetSpec describes a synthetic dataset of OME-NGFF 0.5 images over
// sharded zarr v3 arrays.
type DatasetSpec struct {
	Dir     string   `json:"dir,omitempty"`
	Arrays  int      `json:"arrays"`
	Shape   []int64  `json:"shape"`
	Chunk   []int64  `json:"chunk"`
	Shard   []int64  `json:"shard,omitempty"`
	Dtype   NameList `json:"dtype"`
	Codec   NameList `json:"codec"`
	Level   int      `json:"level,omitempty"`
	Shuffle string   `json:"shuffle,omitempty"`
	Entropy float64  `json:"entropy"`
	// Values, when "zarr_benchmarks", generates the public zarr
	// benchmark's values (writer.BenchmarkFill) instead of Entropy's.
	Values string `json:"values,omitempty"`
	Seed   uint64 `json:"seed"`
	// Labels, when set, adds an OME-NGFF label image to every image.
	Labels *LabelSpec `json:"labels,omitempty"`
}

// RunSpec says how a benchmark reads the dataset: the pipeline's
// configuration (run.config, decoded by pipeline.DecodeConfig, so spelled
// as damacy serve's hello spells it) and the bench's own settings beside it.
type RunSpec struct {
	// Config is run.config: batch_size, sample_shape, dtype, sources,
	// n_io_threads, the *_bytes budgets, augment, ... (pipeline.Config's
	// JSON names). Its augment is the run's augmentation, whose axes are
	// the box's: the image's axes in order (the first source is the
	// image). The bench sets what is not data (Device, Remote, Trace).
	Config pipeline.Config `json:"-"`

	// Boxes is how the boxes are chosen: BoxesRandom ("" too) or
	// BoxesChunks.
	Boxes   string `json:"boxes,omitempty"`
	Batches int    `json:"batches"`
	Warmup  int    `json:"warmup"`
	HoldMS  int    `json:"hold_ms,omitempty"`
	Keep    bool   `json:"keep,omitempty"`
	Engine  string `json:"engine,omitempty"`
	Seed    uint64 `json:"seed"`
	Epochs  int    `json:"epochs,omitempty"`

	// Sampler says how boxes are drawn; nil: uniformly.
	Sampler *SamplerSpec `json:"sampler,omitempty"`
	// Compare measures the comparisons (see CompareReport) in every run.
	Compare bool `json:"compare,omitempty"`
}

// NameList is a JSON string or a list of strings; a single name is a list
// of one.
type NameList []string

func (l *NameList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = NameList{s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*l = list
	return nil
}

func (l NameList) MarshalJSON() ([]byte, error) {
	if len(l) == 1 {
		return json.Marshal(l[0])
	}
	return json.Marshal([]string(l))
}

// At returns the name for array i: the list cycled.
func (l NameList) At(i int) string { return l[i%len(l)] }

// ByteSize is a size in bytes, a flag given as a number or with a unit
// ("6GiB", "512MiB", "1.5GB"), printed with one.
type ByteSize int64

// parseByteSize parses a size as pipeline.ParseByteSize does (the
// pipeline's config decoder reads its byte fields so).
func parseByteSize(s string) (ByteSize, error) {
	v, err := pipeline.ParseByteSize(s)
	return ByteSize(v), err
}

func (b ByteSize) String() string { return base.FormatBytes(int64(b)) }

// Set parses a size as the JSON string form does ("256KiB"), so that a
// ByteSize is a flag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MappedFileBytes resolves --mapped-files into Config.MappedFileBytes:
// "" or auto 0 (the pipeline's default), off -1, else a size.
func MappedFileBytes(v string) (int64, error) {
	switch v {
	case "", "auto":
		return 0, nil
	case "off":
		return -1, nil
	}
	b, err := parseByteSize(v)
	if err == nil && b < 1<<20 {
		err = fmt.Errorf("%v: want at least 1 MiB", b)
	}
	if err != nil {
		return 0, fmt.Errorf("%w (or auto, off)", err)
	}
	return int64(b), nil
}

// ScenarioError is a scenario file that cannot be used: the file and the
// field at fault (a JSON path such as "dataset.chunk[1]").
type ScenarioError struct {
	File  string
	Field string
	Msg   string
}

func (e *ScenarioError) Error() string {
	msg := e.Msg
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.File != "" {
		msg = e.File + ": " + msg
	}
	return msg
}

// LoadScenario reads a scenario from a file or, when no file of that name
// exists and it is a bare name, from the built-in scenarios. The result is
// validated.
func LoadScenario(name string) (*Scenario, error) {
	if fi, err := os.Stat(name); (err != nil || fi.IsDir()) && !strings.ContainsAny(name, `/\`) {
		bare := strings.TrimSuffix(name, ".json")
		b, berr := builtinScenarios.ReadFile(path.Join("scenarios", bare+".json"))
		if berr == nil {
			return parseScenario(bare, b)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: no such file, and not a built-in scenario (%s)", name, strings.Join(BuiltinNames(), ", "))
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

// BuiltinNames lists the built-in scenarios.
func BuiltinNames() []string {
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
		return nil, &ScenarioError{file, "dataset", "missing"}
	}
	if top.Run == nil {
		return nil, &ScenarioError{file, "run", "missing"}
	}
	if err := decodeNested(file, "dataset", top.Dataset); err != nil {
		return nil, err
	}
	if err := strictDecode(top.Dataset, &sc.Dataset); err != nil {
		return nil, jsonFieldError(file, "dataset", top.Dataset, err)
	}
	if err := decodeNested(file, "run", top.Run); err != nil {
		return nil, err
	}
	if err := decodeRun(file, top.Run, &sc.Run, len(sc.Dataset.Shape)); err != nil {
		return nil, err
	}
	if err := sc.validate(); err != nil {
		var se *ScenarioError
		if errors.As(err, &se) {
			se.File = file
		}
		return nil, err
	}
	return sc, nil
}

// decodeRun decodes the run section: run.config by pipeline.DecodeConfig,
// the bench's own fields beside it strictly. rank is dataset.shape's, which
// the messages about augment's axes number.
func decodeRun(file string, b []byte, r *RunSpec, rank int) error {
	var fields map[string]json.RawMessage
	if err := strictDecode(b, &fields); err != nil || fields == nil {
		if err == nil {
			err = errors.New("want an object")
		}
		return jsonFieldError(file, "run", b, err)
	}
	axes := "the image's axes in order"
	if rank >= 2 && rank <= 5 {
		axes += ": " + numberedAxes((&DatasetSpec{Shape: make([]int64, rank)}).axisNames(), nil)
	}
	if _, ok := fields["augment"]; ok {
		return &ScenarioError{file, "run.augment", "moved to run.config.augment (pipeline.Augment: axes are numbers, " + axes + ")"}
	}
	raw, ok := fields["config"]
	if !ok {
		return &ScenarioError{file, "run.config", "missing (the pipeline's configuration: batch_size, sample_shape, dtype, ...)"}
	}
	cfg, err := pipeline.DecodeConfig(raw)
	if err != nil {
		msg := configErrorText(err)
		if strings.HasPrefix(msg, "run.config.augment.") && (strings.Contains(msg, ".axis") || strings.Contains(msg, ".axes")) {
			msg += " (augment's axes are numbers, " + axes + ")"
		}
		return &ScenarioError{File: file, Msg: msg}
	}
	delete(fields, "config")
	rest, err := json.Marshal(fields)
	if err != nil {
		return &ScenarioError{file, "run", err.Error()}
	}
	if err := strictDecode(rest, r); err != nil {
		return jsonFieldError(file, "run", rest, err)
	}
	r.Config = cfg
	return nil
}

// configErrorText is pipeline.DecodeConfig's error with its paths
// ("config.sources[1].dtype") as the scenario's ("run.config.sources[1].dtype").
func configErrorText(err error) string {
	msg := err.Error()
	var pe *pipeline.Error
	if errors.As(err, &pe) && pe.Err != nil {
		msg = pe.Err.Error()
	}
	if strings.HasPrefix(msg, "config") {
		msg = "run." + msg
	}
	return strings.ReplaceAll(msg, " in config", " in run.config")
}

// decodeNested decodes the objects nested in a section (dataset.labels,
// run.sampler) on their own, so that an error inside one names it
// ("run.sampler.kind"), not the section. A section that is not an object
// is left to the section's decoding, which reports it. (run.config, with
// its nested sources and augment, is pipeline.DecodeConfig's, whose
// messages name the nested field.)
func decodeNested(file, section string, b []byte) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return nil
	}
	one := func(field string, raw json.RawMessage, v any) error {
		if err := strictDecode(raw, v); err != nil {
			return jsonFieldError(file, field, raw, err)
		}
		return nil
	}
	switch section {
	case "dataset":
		if raw, ok := fields["labels"]; ok {
			return one("dataset.labels", raw, new(LabelSpec))
		}
	case "run":
		if raw, ok := fields["sampler"]; ok {
			return one("run.sampler", raw, new(SamplerSpec))
		}
	}
	return nil
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
// into a one-line *ScenarioError naming the field.
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
		return &ScenarioError{file, section, fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, strings.TrimPrefix(syn.Error(), "json: "))}
	case errors.As(err, &typ):
		return &ScenarioError{file, join(typ.Field), fmt.Sprintf("cannot use a JSON %s here (want %s)", typ.Value, jsonKind(typ.Type.String()))}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return &ScenarioError{file, section, "truncated JSON"}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		name, _ := strconv.Unquote(f)
		return &ScenarioError{file, join(name), "unknown field"}
	}
	// Errors from UnmarshalJSON methods name no field; find it by decoding
	// the section's fields one at a time.
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) == nil {
		for k := range fields {
			if ferr := probeField(section, k, fields[k]); ferr != nil {
				return &ScenarioError{file, join(k), ferr.Error()}
			}
		}
	}
	return &ScenarioError{file, section, msg}
}

// probeField decodes one field of a section into its Go type, to find
// which field a custom decoder rejected.
func probeField(section, key string, raw json.RawMessage) error {
	var v any
	switch {
	case section == "dataset" && (key == "dtype" || key == "codec"):
		v = new(NameList)
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

// shape returns run.config.sample_shape as the dataset's shapes are
// spelled.
func (r *RunSpec) shape() []int64 {
	s := make([]int64, len(r.Config.SampleShape))
	for i, n := range r.Config.SampleShape {
		s[i] = int64(n)
	}
	return s
}

// setShape sets run.config.sample_shape.
func (r *RunSpec) setShape(s []int64) {
	r.Config.SampleShape = make([]int, len(s))
	for i, n := range s {
		r.Config.SampleShape[i] = int(n)
	}
}
