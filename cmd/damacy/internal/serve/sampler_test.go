package serve

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/pipeline/sampler"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// samplerAnswer is the members of a sampler_open or sampler_draw answer.
type samplerAnswer struct {
	Sampler int64 `json:"sampler"`
	Info    struct {
		Kind         string           `json:"kind"`
		Rank         int              `json:"rank"`
		World        int              `json:"world"`
		Total        int64            `json:"total"`
		PerRank      *int64           `json:"per_rank"`
		Padded       int64            `json:"padded"`
		Dropped      int64            `json:"dropped"`
		NoForeground int              `json:"no_foreground"`
		MaxDraws     int              `json:"max_draws"`
		Arrays       []map[string]any `json:"arrays"`
	} `json:"info"`
	Draws []drawMsg `json:"draws"`
}

func decodeAnswer(t *testing.T, m *protoMsg) samplerAnswer {
	t.Helper()
	var a samplerAnswer
	if err := json.Unmarshal(m.raw, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// wantDraws converts a sampler's draws as the server sends them.
func wantDraws(ds []sampler.Draw) []drawMsg {
	out := []drawMsg{}
	for _, d := range ds {
		m := drawMsg{URI: d.URI, Level: d.Level, Index: d.Index, Array: d.Array, Window: d.Window, Foreground: d.Foreground, Seed: d.Sample.Seed}
		for _, r := range d.Box {
			m.Box = append(m.Box, [2]int64{r.Start, r.Stop})
		}
		out = append(out, m)
	}
	return out
}

// writeLabel writes a 30x41x27 uint8 array with foreground in one box.
func writeLabel(t *testing.T, dir string) string {
	path := filepath.Join(dir, "label.zarr")
	shape := []int64{30, 41, 27}
	w, err := writer.Create(path, writer.Spec{Shape: shape, ChunkShape: []int64{8, 8, 8}, DataType: zarr.Uint8})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 30*41*27)
	for z := 10; z < 14; z++ {
		for y := 20; y < 25; y++ {
			for x := 3; x < 9; x++ {
				data[(z*41+y)*27+x] = 1
			}
		}
	}
	if err := w.WriteRegion([]zarr.Range{{Start: 0, Stop: 30}, {Start: 0, Stop: 41}, {Start: 0, Stop: 27}}, data); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSamplerOps opens samplers before and after hello, draws from them
// and compares with the sampler package's draws for the same config, and
// checks the errors.
func TestSamplerOps(t *testing.T) {
	dir := t.TempDir()
	path, arr := testArray(t, dir)
	label := writeLabel(t, dir)
	c, done := startServe(t)

	// Errors, each naming what is wrong.
	bad := []struct {
		config map[string]any
		status string
		says   string
	}{
		{map[string]any{"arrays": []string{path}, "box": []int{4, 4, 4}, "samples_per_epoch": 5, "bogus": 1}, statusInval, "bogus"},
		{map[string]any{"kind": "random", "arrays": []string{path}, "box": []int{4, 4, 4}}, statusInval, "config.kind"},
		{map[string]any{"arrays": []any{map[string]any{"uri": path, "weigth": 1}}, "box": []int{4, 4, 4}}, statusInval, "weigth"},
		{map[string]any{"arrays": []any{map[string]any{"uri": path, "weight": -1}}, "box": []int{4, 4, 4}, "samples_per_epoch": 5}, statusInval, "arrays[0].weight"},
		{map[string]any{"arrays": []string{path}, "box": []int{4, 4}, "samples_per_epoch": 5}, statusRank, "config.box has 2 axes"},
		{map[string]any{"arrays": []string{path}, "box": []int{4, 4, 4}}, statusInval, "samples_per_epoch"},
		{map[string]any{"arrays": []string{filepath.Join(dir, "nope.zarr")}, "box": []int{4, 4, 4}, "samples_per_epoch": 5}, statusNotFound, "nope.zarr"},
		{map[string]any{"arrays": []string{path}, "box": "4", "samples_per_epoch": 5}, statusInval, "config.box"},
		{map[string]any{"kind": "grid", "arrays": []string{path}, "box": []int{4, 4, 4}, "overlap": []int{1, 4, 1}}, statusInval, "overlap[1]"},
		{map[string]any{"kind": "foreground", "arrays": []string{path}, "box": []int{4, 4, 4}, "samples_per_epoch": 5, "label_level": -1}, statusInval, "label_level"},
	}
	for _, b := range bad {
		e := wantError(t, "sampler_open", c.call("sampler_open", map[string]any{"config": b.config}), b.status)
		if !strings.Contains(e.Message, b.says) || e.What != "sampler_open" {
			t.Errorf("sampler_open %v: %+v does not say %q", b.config, e, b.says)
		}
	}
	wantError(t, "sampler_draw of no sampler", c.call("sampler_draw", map[string]any{"sampler": 0, "epoch": 0, "start": 0, "n": 1}), statusInval)

	// A uniform sampler, rank 1 of 2, before hello.
	cfg := sampler.Config{Arrays: []sampler.Array{{URI: path}, {URI: path, Weight: 0}}, Box: []int64{7, 9, 5}, Seed: 99, Rank: 1, World: 2, SamplesPerEpoch: 25}
	want, err := sampler.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	open := mustOK(t, "sampler_open", c.call("sampler_open", map[string]any{"config": map[string]any{
		"kind": "uniform", "arrays": []any{path, map[string]any{"uri": path}}, "box": []int{7, 9, 5}, "seed": 99, "rank": 1, "world": 2,
		"samples_per_epoch": 25, "drop_last": false, "label_level": nil,
	}}))
	a := decodeAnswer(t, open)
	in := a.Info
	if in.Kind != "uniform" || in.Rank != 1 || in.World != 2 || in.Total != 25 || in.PerRank == nil || *in.PerRank != 13 || in.Padded != 1 || len(in.Arrays) != 2 || in.MaxDraws < 1000 {
		t.Errorf("info %+v", in)
	}
	if sh := in.Arrays[0]["shape"]; !reflect.DeepEqual(sh, []any{30.0, 41.0, 27.0}) {
		t.Errorf("info shape %v, want %v", sh, arr.Shape())
	}
	draw := func(sid, epoch, start int64, n int) []drawMsg {
		t.Helper()
		m := mustOK(t, "sampler_draw", c.call("sampler_draw", map[string]any{"sampler": sid, "epoch": epoch, "start": start, "n": n}))
		return decodeAnswer(t, m).Draws
	}
	got := draw(a.Sampler, 4, 0, 100)
	if w := wantDraws(want.Draws(sampler.State{Epoch: 4}, 100)); len(got) != 13 || !reflect.DeepEqual(got, w) {
		t.Errorf("draws of epoch 4:\n%+v\nwant\n%+v", got, w)
	}
	if part := draw(a.Sampler, 4, 5, 3); !reflect.DeepEqual(part, got[5:8]) {
		t.Errorf("draws 5..8 %+v, want %+v", part, got[5:8])
	}
	if end := draw(a.Sampler, 4, 13, 5); len(end) != 0 {
		t.Errorf("draws past the epoch's end: %+v", end)
	}
	e := wantError(t, "sampler_draw of too many", c.call("sampler_draw", map[string]any{"sampler": a.Sampler, "epoch": 0, "start": 0, "n": in.MaxDraws + 1}), statusInval)
	if !strings.Contains(e.Message, "max_draws") {
		t.Errorf("too many draws: %q", e.Message)
	}
	wantError(t, "sampler_draw of a negative epoch", c.call("sampler_draw", map[string]any{"sampler": a.Sampler, "epoch": -1, "start": 0, "n": 1}), statusInval)
	wantError(t, "sampler_draw without n", c.call("sampler_draw", map[string]any{"sampler": a.Sampler, "epoch": 0, "start": 0}), statusInval)

	// The pipeline comes after; samplers go on.
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	if again := draw(a.Sampler, 4, 0, 13); !reflect.DeepEqual(again, got) {
		t.Errorf("draws after hello differ")
	}

	// A grid, an infinite sampler and a foreground sampler.
	grid := decodeAnswer(t, mustOK(t, "sampler_open", c.call("sampler_open", map[string]any{"config": map[string]any{
		"kind": "grid", "arrays": []string{path}, "box": []int{16, 16, 16}, "overlap": 4,
	}})))
	if gi := grid.Info; gi.Total != 3*4*2 || *gi.PerRank != 24 || !reflect.DeepEqual(gi.Arrays[0]["windows"], []any{3.0, 4.0, 2.0}) {
		t.Errorf("grid info %+v", gi)
	}
	gd := draw(grid.Sampler, 0, 0, 30)
	if len(gd) != 24 || !reflect.DeepEqual(gd[23].Window, []int64{2, 3, 1}) || gd[23].Box[0] != [2]int64{14, 30} {
		t.Errorf("grid draws %+v", gd)
	}
	inf := decodeAnswer(t, mustOK(t, "sampler_open", c.call("sampler_open", map[string]any{"config": map[string]any{
		"arrays": []string{path}, "box": []int{4, 4, 4}, "infinite": true,
	}})))
	if inf.Info.PerRank != nil || len(draw(inf.Sampler, 0, 1<<40, 10)) != 10 {
		t.Errorf("infinite sampler: info %+v", inf.Info)
	}
	fg := decodeAnswer(t, mustOK(t, "sampler_open", c.call("sampler_open", map[string]any{"config": map[string]any{
		"kind": "foreground", "arrays": []any{map[string]any{"uri": path, "label": label}, map[string]any{"uri": path}}, "box": []int{3, 3, 3},
		"samples_per_epoch": 40, "fraction": 1, "threshold": 1e9,
	}})))
	if fg.Info.NoForeground != 1 || fg.Info.Arrays[0]["foreground_voxels"] != 120.0 || fg.Info.Arrays[0]["label"] != label {
		t.Errorf("foreground info %+v", fg.Info)
	}
	for _, d := range draw(fg.Sampler, 0, 0, 40) {
		if d.Foreground != (d.Array == 0) {
			t.Fatalf("foreground draw %+v", d)
		}
		if d.Foreground && (d.Box[0][0]+1 < 10 || d.Box[0][0]+1 >= 14 || d.Box[1][0]+1 < 20 || d.Box[1][0]+1 >= 25) {
			t.Fatalf("foreground draw %+v: centre outside the foreground", d)
		}
	}

	// Close.
	mustOK(t, "sampler_close", c.call("sampler_close", map[string]any{"sampler": a.Sampler}))
	wantError(t, "sampler_draw after close", c.call("sampler_draw", map[string]any{"sampler": a.Sampler, "epoch": 0, "start": 0, "n": 1}), statusInval)
	wantError(t, "sampler_close twice", c.call("sampler_close", map[string]any{"sampler": a.Sampler}), statusInval)
	mustOK(t, "close", c.call("close", nil))
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

func TestWireFields(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Config.Arrays[2].Weight: -1", "config.arrays[2].weight: -1"},
		{"Config.SamplesPerEpoch: 0; Config.MaxLabelVoxels", "config.samples_per_epoch: 0; config.max_label_voxels"},
		{"Config.Arrays[0].URI empty", "config.arrays[0].uri empty"},
		{"Config.OverlapFraction[1]: 2", "config.overlap_fraction[1]: 2"},
	}
	for _, tt := range tests {
		if got := wireFields(tt.in); got != tt.want {
			t.Errorf("wireFields(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
