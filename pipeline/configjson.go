package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// DecodeConfig decodes a Config from JSON: an object whose keys are the
// fields' JSON names (their struct tags: "batch_size", "n_io_threads",
// "host_buffer_bytes", ...; Source's and Augment's likewise). It is the
// one spelling of a configuration, which `damacy serve`'s hello and the
// bench's scenarios share.
//
// An absent field, or null, is the zero value (the field's default).
// Dtypes are names as ParseDtype accepts ("f32", "bf16", "uint8", ...),
// on_error "raise" or "skip"; a byte count (a field named *_bytes) is an
// integer or a string with a unit ("64MiB", "1.5GB"; see ParseByteSize),
// and mapped_file_bytes may also be "auto" (0) or "off" (-1); augment's
// clip is [low, high]. Fields that are not data (Device, Remote, Trace,
// Logger) are not decoded: the caller sets them.
//
// Unknown keys, and values of the wrong type, fail with ErrInvalid naming
// the key ("config.sources[1].dtype"). Ranges are New's to check.
func DecodeConfig(data []byte) (Config, error) {
	var c Config
	if err := decodeObject("config", data, reflect.ValueOf(&c).Elem()); err != nil {
		return Config{}, err
	}
	return c, nil
}

// JSONName returns the JSON name of a field of Config, Source or Augment
// given its Go name ("IOThreads" as "n_io_threads"), and false for a field
// that has none (Trace, Logger, ...). Augment's ClipLow and ClipHigh are
// "clip".
func JSONName(v any, field string) (string, bool) {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[Augment]() && (field == "Clip" || field == "ClipLow" || field == "ClipHigh") {
		return "clip", true
	}
	f, ok := t.FieldByName(field)
	if !ok {
		return "", false
	}
	name := jsonTag(f)
	return name, name != ""
}

func jsonTag(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// decodeObject decodes the JSON object data into the struct v, key by key,
// naming each at fault as path.key.
func decodeObject(path string, data []byte, v reflect.Value) error {
	var raw map[string]json.RawMessage
	if err := strictUnmarshal(data, &raw); err != nil || raw == nil && !isNull(data) {
		return badValue(path, data, "an object")
	}
	fields := map[string]int{}
	t := v.Type()
	for i := range t.NumField() {
		if name := jsonTag(t.Field(i)); name != "" {
			fields[name] = i
		}
	}
	augment := t == reflect.TypeFor[Augment]()
	var unknown []string
	for k := range raw {
		if _, ok := fields[k]; !ok && !(augment && k == "clip") {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return errorf("decode config", ErrInvalid, "", "unknown keys in %s: %s", path, strings.Join(unknown, ", "))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		val := raw[k]
		if isNull(val) {
			continue
		}
		if augment && k == "clip" {
			var c []float64
			if strictUnmarshal(val, &c) != nil || len(c) != 2 {
				return badValue(path+".clip", val, "[low, high]")
			}
			a := v.Addr().Interface().(*Augment)
			a.Clip, a.ClipLow, a.ClipHigh = true, c[0], c[1]
			continue
		}
		if err := decodeValue(path+"."+k, val, v.Field(fields[k])); err != nil {
			return err
		}
	}
	return nil
}

// decodeValue decodes one field's value.
func decodeValue(path string, data []byte, v reflect.Value) error {
	switch p := v.Addr().Interface().(type) {
	case *Dtype:
		var s string
		if strictUnmarshal(data, &s) != nil {
			return badValue(path, data, `a dtype name ("f32", "bf16", "uint8", "int32", "int64", ...)`)
		}
		if s == "" {
			*p = F32
			return nil
		}
		d, err := ParseDtype(s)
		if err != nil {
			return badValue(path, data, `a dtype name ("f32", "bf16", "uint8", "int32", "int64", ...)`)
		}
		*p = d
		return nil
	case *ErrorPolicy:
		var s string
		if strictUnmarshal(data, &s) != nil {
			return badValue(path, data, `"raise" or "skip"`)
		}
		e, err := ParseErrorPolicy(s)
		if err != nil {
			return badValue(path, data, `"raise" or "skip"`)
		}
		*p = e
		return nil
	case *int64:
		if strings.HasSuffix(path, "_bytes") {
			n, err := decodeBytes(path, data)
			if err != nil {
				return err
			}
			*p = n
			return nil
		}
	}
	switch v.Kind() {
	case reflect.Array: // a list of exactly its length
		n := v.Len()
		s := reflect.New(reflect.SliceOf(v.Type().Elem()))
		if strictUnmarshal(data, s.Interface()) != nil || s.Elem().Len() != n {
			return badValue(path, data, fmt.Sprintf("a list of %d %ss", n, nounOf(v.Type().Elem())))
		}
		reflect.Copy(v, s.Elem())
		return nil
	case reflect.Struct:
		return decodeObject(path, data, v)
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct {
			nv := reflect.New(v.Type().Elem())
			if err := decodeObject(path, data, nv.Elem()); err != nil {
				return err
			}
			v.Set(nv)
			return nil
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			var items []json.RawMessage
			if strictUnmarshal(data, &items) != nil {
				return badValue(path, data, "a list of objects")
			}
			out := reflect.MakeSlice(v.Type(), len(items), len(items))
			for i, item := range items {
				if err := decodeValue(fmt.Sprintf("%s[%d]", path, i), item, out.Index(i)); err != nil {
					return err
				}
			}
			v.Set(out)
			return nil
		}
	}
	if strictUnmarshal(data, v.Addr().Interface()) != nil {
		return badValue(path, data, kindOf(v.Type()))
	}
	return nil
}

// decodeBytes decodes a byte count: an integer or a size with a unit, and
// for mapped_file_bytes "auto" (0) and "off" (-1).
func decodeBytes(path string, data []byte) (int64, error) {
	var n int64
	if strictUnmarshal(data, &n) == nil {
		return n, nil
	}
	var s string
	if strictUnmarshal(data, &s) != nil {
		return 0, badValue(path, data, `a byte count (an integer, or a string such as "64MiB")`)
	}
	if strings.HasSuffix(path, "mapped_file_bytes") {
		switch s {
		case "auto":
			return 0, nil
		case "off":
			return -1, nil
		}
	}
	n, err := ParseByteSize(s)
	if err != nil {
		return 0, badValue(path, data, `a byte count (an integer, or a string such as "64MiB")`)
	}
	return n, nil
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseByteSize parses a non-negative size in bytes: a number, or a number
// with a unit: B, KiB, MiB, GiB, TiB, KB, MB, GB or TB ("6GiB", "512MiB",
// "1.5GB").
func ParseByteSize(s string) (int64, error) {
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
	return int64(math.Round(v * mult)), nil
}

func badValue(path string, data []byte, want string) error {
	return errorf("decode config", ErrInvalid, "", "%s = %s: must be %s", path, compact(data), want)
}

func compact(data []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, data) != nil {
		return strconv.Quote(string(data))
	}
	return b.String()
}

func isNull(data []byte) bool { return string(bytes.TrimSpace(data)) == "null" }

func strictUnmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func kindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list of " + nounOf(t.Elem()) + "s"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32, reflect.Uint:
		return "an " + nounOf(t)
	case reflect.Bool:
		return "true or false"
	}
	return "a " + nounOf(t)
}

func nounOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		return "integer >= 0"
	case reflect.Float64, reflect.Float32:
		return "number"
	case reflect.String:
		return "string"
	}
	return "object"
}
