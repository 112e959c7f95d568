package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/damacy-go/damacy/pipeline/sampler"
	"github.com/damacy-go/damacy/zarr/remote"
)

// The sampler ops (PROTOCOL.md, "Samplers"): sampler_open makes a
// sampler.Sampler from a JSON config and answers its id and info;
// sampler_draw answers the draws of (epoch, start, n), statelessly, so the
// client keeps the position; sampler_close forgets one. Samplers need no
// pipeline: these ops may come before hello. They live until closed or
// until the connection ends.

// Bounds of the sampler ops.
const (
	// maxSamplers bounds the samplers open at once on one connection.
	maxSamplers = 256
	// drawBudget bounds the JSON of one sampler_draw answer, well within
	// a frame.
	drawBudget = maxFrame / 2
)

// samplers are a connection's open samplers; only the request loop uses
// them.
type samplers struct {
	next int64
	byID map[int64]*sampler.Sampler
}

// samplerOp handles the sampler ops and reports whether req was one.
func (s *server) samplerOp(id int64, req *request) bool {
	switch req.Op {
	case "sampler_open":
		s.samplerOpen(id, req)
	case "sampler_draw":
		s.samplerDraw(id, req)
	case "sampler_close":
		if req.Sampler == nil || s.smp.byID[*req.Sampler] == nil {
			s.fail(id, req.Op, statusErrorf(statusInval, "sampler_close: no open sampler %s", idText(req.Sampler)), nil)
			return true
		}
		delete(s.smp.byID, *req.Sampler)
		s.reply(id, nil, nil)
	default:
		return false
	}
	return true
}

func idText(p *int64) string {
	if p == nil {
		return "(no \"sampler\" member)"
	}
	return fmt.Sprint(*p)
}

// samplerOpen makes a sampler from req.Config.
func (s *server) samplerOpen(id int64, req *request) {
	if len(s.smp.byID) >= maxSamplers {
		s.fail(id, req.Op, statusErrorf(statusInval, "sampler_open: %d samplers are open: close some first", maxSamplers), nil)
		return
	}
	cfg, err := samplerConfigOf(req.Config)
	if err != nil {
		s.fail(id, req.Op, err, nil)
		return
	}
	op, err := remote.NewOpener(remote.Options{})
	if err != nil {
		s.fail(id, req.Op, err, nil)
		return
	}
	defer op.Close() // the sampler reads stores only while it is made
	cfg.Open = op.Open
	smp, err := sampler.New(context.Background(), cfg)
	if err != nil {
		s.fail(id, req.Op, statusErrorf(statusOf(err), "%s", wireFields(err.Error())), nil)
		return
	}
	if s.smp.byID == nil {
		s.smp.byID = map[int64]*sampler.Sampler{}
	}
	sid := s.smp.next
	s.smp.next++
	s.smp.byID[sid] = smp
	s.reply(id, map[string]any{"sampler": sid, "info": infoMsg(smp)}, nil)
}

// samplerDraw answers the draws start, start+1, ... (at most n, fewer at
// the epoch's end) of this rank's epoch.
func (s *server) samplerDraw(id int64, req *request) {
	var smp *sampler.Sampler
	if req.Sampler != nil {
		smp = s.smp.byID[*req.Sampler]
	}
	switch {
	case smp == nil:
		s.fail(id, req.Op, statusErrorf(statusInval, "sampler_draw: no open sampler %s", idText(req.Sampler)), nil)
		return
	case req.Epoch == nil || *req.Epoch < 0:
		s.fail(id, req.Op, statusErrorf(statusInval, "sampler_draw: epoch must be an integer >= 0"), nil)
		return
	case req.Start == nil || *req.Start < 0:
		s.fail(id, req.Op, statusErrorf(statusInval, "sampler_draw: start must be an integer >= 0"), nil)
		return
	case req.N == nil || *req.N < 0:
		s.fail(id, req.Op, statusErrorf(statusInval, "sampler_draw: n must be an integer >= 0"), nil)
		return
	}
	if most := maxDraws(smp); *req.N > most {
		s.fail(id, req.Op, statusErrorf(statusInval, "sampler_draw: n = %d: at most %d draws of this sampler fit an answer (info.max_draws)", *req.N, most), nil)
		return
	}
	draws := smp.Draws(sampler.State{Epoch: *req.Epoch, Next: *req.Start}, *req.N)
	out := make([]drawMsg, len(draws))
	for i, d := range draws {
		box := make([][2]int64, len(d.Box))
		for k, r := range d.Box {
			box[k] = [2]int64{r.Start, r.Stop}
		}
		out[i] = drawMsg{URI: d.URI, Level: d.Level, Box: box, Index: d.Index, Array: d.Array, Window: d.Window, Foreground: d.Foreground, Seed: d.Sample.Seed}
	}
	s.reply(id, map[string]any{"draws": out}, nil)
}

// maxDraws is how many draws of smp one answer holds: the longest draw's
// JSON (its longest URI, escaped, and every number at its widest) into
// drawBudget.
func maxDraws(smp *sampler.Sampler) int {
	in := smp.Info()
	uri := 0
	for _, a := range in.Arrays {
		uri = max(uri, 6*len(a.URI)) // \u00XX at worst
	}
	rank := len(in.Arrays[0].Shape)
	per := 128 + uri + rank*(2*21+4) + rank*21
	return drawBudget / per
}

// drawMsg is one draw of a sampler_draw answer.
type drawMsg struct {
	URI        string     `json:"uri"`
	Level      int        `json:"level"`
	Box        [][2]int64 `json:"box"`
	Index      int64      `json:"index"`
	Array      int        `json:"array"`
	Window     []int64    `json:"window,omitempty"`
	Foreground bool       `json:"foreground,omitempty"`
	Seed       uint64     `json:"seed"` // the sample's seed for config.augment
}

// infoMsg is a sampler's info as sampler_open answers it.
func infoMsg(smp *sampler.Sampler) map[string]any {
	in := smp.Info()
	arrays := make([]map[string]any, len(in.Arrays))
	for i, a := range in.Arrays {
		m := map[string]any{"uri": a.URI, "level": a.Level, "shape": a.Shape, "axes": a.Axes, "weight": a.Weight}
		if in.Kind == sampler.Grid {
			m["windows"] = a.Windows
		}
		if in.Kind == sampler.Foreground {
			m["label"], m["label_level"], m["label_shape"], m["foreground_voxels"] = a.Label, a.LabelLevel, a.LabelShape, a.ForegroundVoxels
		}
		arrays[i] = m
	}
	var perRank any = in.PerRank
	if in.PerRank < 0 {
		perRank = nil
	}
	return map[string]any{
		"kind": in.Kind.String(), "rank": in.Rank, "world": in.World, "total": in.Total, "per_rank": perRank,
		"padded": in.Padded, "dropped": in.Dropped, "no_foreground": in.NoForeground, "arrays": arrays,
		"max_draws": maxDraws(smp),
	}
}

// samplerConfigOf maps sampler_open's config onto a sampler.Config.
func samplerConfigOf(raw map[string]json.RawMessage) (sampler.Config, error) {
	cfg := sampler.Config{LabelLevel: sampler.AutoLevel}
	var unknown []string
	for k, v := range raw {
		var err error
		switch k {
		case "kind":
			var name string
			if err = json.Unmarshal(v, &name); err == nil {
				cfg.Kind, err = sampler.ParseKind(name)
				if err != nil {
					return cfg, statusErrorf(statusInval, "config.kind = %s: want \"uniform\", \"foreground\" or \"grid\"", v)
				}
			}
		case "arrays":
			cfg.Arrays, err = arraysOf(v)
		case "box":
			err = json.Unmarshal(v, &cfg.Box)
		case "seed":
			err = json.Unmarshal(v, &cfg.Seed)
		case "rank":
			err = json.Unmarshal(v, &cfg.Rank)
		case "world":
			err = json.Unmarshal(v, &cfg.World)
		case "samples_per_epoch":
			err = nullable(v, &cfg.SamplesPerEpoch)
		case "infinite":
			err = json.Unmarshal(v, &cfg.Infinite)
		case "drop_last":
			err = json.Unmarshal(v, &cfg.DropLast)
		case "fraction":
			err = json.Unmarshal(v, &cfg.Fraction)
		case "label_level":
			err = nullable(v, &cfg.LabelLevel)
			if err == nil && string(v) != "null" && cfg.LabelLevel < 0 {
				err = fmt.Errorf("want a level index >= 0, or null (the finest level of at most max_label_voxels voxels)")
			}
		case "max_label_voxels":
			err = json.Unmarshal(v, &cfg.MaxLabelVoxels)
		case "threshold":
			err = json.Unmarshal(v, &cfg.Threshold)
		case "overlap":
			err = oneOrMany(v, &cfg.Overlap)
		case "overlap_fraction":
			err = oneOrMany(v, &cfg.OverlapFraction)
		default:
			unknown = append(unknown, k)
		}
		if err != nil {
			return cfg, statusErrorf(statusInval, "config.%s = %s: %v", k, v, bareJSON(err))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return cfg, statusErrorf(statusInval, "unknown sampler config keys: %s", strings.Join(unknown, ", "))
	}
	return cfg, nil
}

// arraysOf parses config.arrays: URIs, or objects {"uri", "level",
// "weight", "label"}.
func arraysOf(v json.RawMessage) ([]sampler.Array, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, err
	}
	out := make([]sampler.Array, len(items))
	for i, item := range items {
		if json.Unmarshal(item, &out[i].URI) == nil {
			continue
		}
		var a struct {
			URI    string  `json:"uri"`
			Level  int     `json:"level"`
			Weight float64 `json:"weight"`
			Label  string  `json:"label"`
		}
		dec := json.NewDecoder(strings.NewReader(string(item)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return nil, fmt.Errorf("item %d: want a URI or {\"uri\", \"level\", \"weight\", \"label\"}: %v", i, bareJSON(err))
		}
		out[i] = sampler.Array(a)
	}
	return out, nil
}

// nullable unmarshals v into *dst, leaving it as it is for null.
func nullable[T any](v json.RawMessage, dst *T) error {
	if string(v) == "null" {
		return nil
	}
	return json.Unmarshal(v, dst)
}

// oneOrMany unmarshals one value or a list of them.
func oneOrMany[T any](v json.RawMessage, dst *[]T) error {
	var one T
	if json.Unmarshal(v, &one) == nil {
		*dst = []T{one}
		return nil
	}
	return json.Unmarshal(v, dst)
}

// bareJSON drops the Go type names that encoding/json's errors carry.
func bareJSON(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("a JSON %s where %s belongs", te.Value, jsonKind(te.Type.Kind().String()))
	}
	return err.Error()
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"):
		return "an integer"
	case strings.HasPrefix(goKind, "float"):
		return "a number"
	case goKind == "bool":
		return "true or false"
	case goKind == "string":
		return "a string"
	case goKind == "slice":
		return "a list"
	}
	return "another value"
}

// configField finds the sampler package's "Config.Field[i].Sub" names.
var configField = regexp.MustCompile(`Config\.[A-Za-z]+(\[\d+\])?(\.[A-Za-z]+)?`)

// wireFields rewrites a sampler error's Go field names as the config's
// JSON names ("Config.Arrays[1].Weight" as "config.arrays[1].weight").
func wireFields(msg string) string {
	return configField.ReplaceAllStringFunc(msg, func(f string) string {
		var b strings.Builder
		b.WriteString("config.")
		f = strings.TrimPrefix(f, "Config.")
		for i := 0; i < len(f); i++ {
			c := f[i]
			if 'A' <= c && c <= 'Z' {
				if i > 0 && 'a' <= f[i-1] && f[i-1] <= 'z' {
					b.WriteByte('_')
				}
				c += 'a' - 'A'
			}
			b.WriteByte(c)
		}
		return b.String()
	})
}
