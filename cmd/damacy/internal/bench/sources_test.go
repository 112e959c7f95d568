package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/damacy-go/damacy/pipeline"
)

// segScenario is a tiny segmentation scenario (czyx images with a label
// image) that the bad-field cases edit and the host-engine runs read.
const segScenario = `{
  "name": "seg",
  "dataset": {"arrays": 2, "shape": [1, 16, 64, 64], "chunk": [1, 8, 32, 32], "shard": [1, 16, 64, 64],
              "dtype": "uint16", "codec": "zstd", "level": 3, "entropy": 0.5, "seed": 1,
              "labels": {"name": "cells", "dtype": "uint8", "chunk": [8, 32, 32], "shard": [16, 64, 64], "codec": "zstd", "foreground": 0.1}},
  "run": {"config": {"batch_size": 2, "sample_shape": [1, 8, 32, 32],
                     "sources": [{"name": "image", "dtype": "bf16"}, {"name": "label", "label": "cells", "dtype": "u8"}],
                     "lookahead_batches": 2, "n_io_threads": 2, "max_gpu_memory_bytes": "2GiB",
                     "host_buffer_bytes": "64MiB", "device_buffer_bytes": "64MiB",
                     "augment": {"seed": 1, "flip": [{"axis": 1, "p": 0.5}, {"axis": 2, "p": 0.5}, {"axis": 3, "p": 0.5}],
                                 "rot90": [{"axes": [2, 3], "p": 0.5}], "mean": 16384, "std": 21000}},
          "batches": 3, "warmup": 1,
          "sampler": {"kind": "foreground", "fraction": 0.67},
          "compare": true, "engine": "host", "seed": 1}
}`

var badSegScenarioTests = []badScenarioTest{
	{`"name": "cells",`, `"name": "",`, `dataset.labels.name: missing`},
	{`"name": "cells",`, `"name": "a/b",`, `dataset.labels.name: "a/b": use letters`},
	{`"dtype": "uint8",`, `"dtype": "float32",`, `dataset.labels.dtype: "float32": want an integer zarr data type`},
	{`"dtype": "uint16", "codec"`, `"dtype": "float16", "codec"`, `dataset.dtype: float16: an image with labels is brightened`},
	{`"chunk": [8, 32, 32]`, `"chunk": [1, 8, 32, 32]`, `dataset.labels.chunk: has 4 axes; want the image's 3 space axes`},
	{`"chunk": [8, 32, 32]`, `"chunk": [8, 0, 32]`, `dataset.labels.chunk[1]: 0: must be positive`},
	{`"shard": [16, 64, 64]`, `"shard": [16, 48, 64]`, `dataset.labels.shard[1]: 48 is not a multiple of dataset.labels.chunk[1] = 32`},
	{`"codec": "zstd", "foreground"`, `"codec": "brotli", "foreground"`, `dataset.labels.codec: "brotli" is not a codec`},
	{`"codec": "zstd", "foreground"`, `"codec": "zstd", "level": 99, "foreground"`, `dataset.labels.level: 99: out of range for zstd`},
	{`"foreground": 0.1`, `"foreground": 0`, `dataset.labels.foreground: 0: must be in (0, 0.9]`},
	{`"foreground": 0.1`, `"foreground": 0.1, "colour": 1`, `dataset.labels.colour: unknown field`},
	{`"foreground": 0.1`, `"foreground": "lots"`, `dataset.labels.foreground: cannot use a JSON string here (want a number)`},
	{`{"name": "image", "dtype": "bf16"}`, `{"name": "a b", "dtype": "bf16"}`, `run.config.sources[0].name: "a b": use letters`},
	{`{"name": "image", "dtype": "bf16"}`, `{"name": "image", "dtype": "f16"}`, `run.config.sources[0].dtype = "f16"`},
	{`{"name": "image", "dtype": "bf16"}`, `{"name": "image", "dtype": "u8"}`, `run.config.sources[0].dtype: uint8: integer outputs are for label sources`},
	{`{"name": "image", "dtype": "bf16"}`, `{"name": "image", "label": "cells", "dtype": "bf16"}`, `run.config.sources[0].label: "cells": the first source is the image`},
	{`"label": "cells", "dtype": "u8"`, `"label": "nuclei", "dtype": "u8"`, `run.config.sources[1].label: "nuclei": the dataset's label images are "cells"`},
	{`"label": "cells", "dtype": "u8"`, `"label": "cells", "dtype": "u8", "path": "x"`, `run.config.sources[1].path: "x": the bench reads the image and its labels`},
	{`"label": "cells", "dtype": "u8"`, `"label": "cells", "dtype": "u8", "device_buffer_bytes": "lots"`, `run.config.sources[1].device_buffer_bytes = "lots"`},
	{`"label": "cells", "dtype": "u8"`, `"label": "cells", "dtype": "u8", "hostbuf": 1`, `unknown keys in run.config.sources[1]: hostbuf`},
	{`"kind": "foreground"`, `"kind": "grid"`, `run.sampler.kind: "grid": want uniform or foreground`},
	{`"fraction": 0.67`, `"fraction": 1.5`, `run.sampler.fraction: 1.5: must be in (0, 1]`},
	{`"kind": "foreground", "fraction": 0.67`, `"kind": "uniform", "fraction": 0.67`, `run.sampler.fraction: is for the foreground sampler`},
	{`{"axis": 1, "p": 0.5}`, `{"axis": 0, "p": 0.5}`, `run.config.augment.flip[0].axis: 0 (c) is not an axis of source "label" (1 z, 2 y, 3 x): the geometric transforms act on every source`},
	{`{"axis": 1, "p": 0.5}`, `{"axis": 4, "p": 0.5}`, `run.config.augment.flip[0].axis: 4: want an axis of the image (0 c, 1 z, 2 y, 3 x)`},
	{`{"axis": 1, "p": 0.5}`, `{"axis": -1, "p": 0.5}`, `run.config.augment.flip[0].axis: -1: want an axis of the image`},
	{`"rot90": [{"axes": [2, 3], "p": 0.5}]`, `"rot90": [{"axes": [0, 3], "p": 0.5}]`, `run.config.augment.rot90[0].axes[0]: 0 (c) is not an axis of source "label"`},
	{`"rot90": [{"axes": [2, 3], "p": 0.5}]`, `"permute": [{"axes": [2, 5], "p": 0.5}]`, `run.config.augment.permute[0].axes[1]: 5: want an axis of the image`},
	{`"mean": 16384, "std": 21000`, `"std": 1, "intensity_sources": ["label"]`, `run.config.augment.intensity_sources[0]: "label" has an integer output`},
	{`"mean": 16384, "std": 21000`, `"std": 1, "intensity_sources": ["mask"]`, `run.config.augment.intensity_sources[0]: "mask" is not a source`},
	// The decoder's (pipeline.DecodeConfig) messages name the nested field.
	{`{"axis": 1, "p": 0.5}`, `{"axis": "z", "p": 0.5}`, `run.config.augment.flip[0].axis = "z": must be an integer (augment's axes are numbers, the image's axes in order: 0 c, 1 z, 2 y, 3 x)`},
	{`"rot90": [{"axes": [2, 3], "p": 0.5}]`, `"rot90": [{"axes": ["y", "x"], "p": 0.5}]`, `run.config.augment.rot90[0].axes = ["y","x"]: must be a list of 2 integers (augment's axes are numbers`},
	{`"rot90": [{"axes": [2, 3], "p": 0.5}]`, `"rot90": [{"axes": [2], "p": 0.5}]`, `run.config.augment.rot90[0].axes = [2]: must be a list of 2 integers`},
	{`{"axis": 1, "p": 0.5}`, `{"axis": 1, "q": 0.5}`, `unknown keys in run.config.augment.flip[0]: q`},
	{`"mean": 16384, "std": 21000`, `"clip": [1]`, `run.config.augment.clip = [1]: must be [low, high]`},
	{`"seed": 1, "flip"`, `"seed": 1, "flop": 1, "flip"`, `unknown keys in run.config.augment: flop`},
	// The bench's augment of before, beside run.config.
	{`"batches": 3,`, `"augment": {"seed": 1, "flip": [{"axis": "z", "p": 0.5}]}, "batches": 3,`, `run.augment: moved to run.config.augment (pipeline.Augment: axes are numbers, the image's axes in order: 0 c, 1 z, 2 y, 3 x)`},
	{`"compare": true,`, `"compare": 1,`, `run.compare: cannot use a JSON number here (want true or false)`},
}

// TestBadSegScenarios: a bad field of the labels, sources, sampler or
// augment is one error line naming it.
func TestBadSegScenarios(t *testing.T) {
	dir := t.TempDir()
	if _, err := parseScenario("seg", []byte(segScenario)); err != nil {
		t.Fatalf("the valid segmentation scenario: %v", err)
	}
	for i := range badSegScenarioTests {
		tt := &badSegScenarioTests[i]
		if !strings.Contains(segScenario, tt.old) {
			t.Fatalf("case %d: %q is not in the valid scenario", i, tt.old)
		}
		doc := strings.Replace(segScenario, tt.old, tt.new, 1)
		file := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		sc, err := LoadScenario(file)
		want := file + ": " + tt.want
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("LoadScenario with %s -> %s = %v, %v; want one line starting %q", tt.old, tt.new, sc, err, want)
		}
	}
	// Without labels, a label source or the foreground sampler has none to read.
	for _, tt := range []struct{ old, new, want string }{
		{`{"name": "image", "dtype": "bf16"}, {"name": "label", "label": "cells", "dtype": "u8"}`, `{"name": "image", "dtype": "bf16"}, {"name": "label", "label": "cells", "dtype": "u8"}`, `run.config.sources[1].label: "cells": the dataset has no label images`},
		{`"sources": [{"name": "image", "dtype": "bf16"}, {"name": "label", "label": "cells", "dtype": "u8"}],`, `"dtype": "bf16",`, `run.sampler.kind: foreground needs label images`},
	} {
		doc := strings.Replace(strings.Replace(segScenario, tt.old, tt.new, 1), `,
              "labels": {"name": "cells", "dtype": "uint8", "chunk": [8, 32, 32], "shard": [16, 64, 64], "codec": "zstd", "foreground": 0.1}}`, `}`, 1)
		if _, err := parseScenario("f", []byte(doc)); err == nil || !strings.HasPrefix(err.Error(), "f: "+tt.want) {
			t.Errorf("without labels: %v; want %q", err, tt.want)
		}
	}
}

// TestSegmentationScenario: the built-in segmentation scenario reads an
// image and its label into one pipeline, as the 3D U-Net setup.
func TestSegmentationScenario(t *testing.T) {
	sc, err := LoadScenario("segmentation")
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipelineConfig(sc)
	want := []pipeline.Source{{Name: "image", Dtype: pipeline.BF16}, {Name: "label", Label: "cells", Dtype: pipeline.U8, HostBufferBytes: 768 << 20, DeviceBufferBytes: 512 << 20}}
	if diff := cmp.Diff(want, cfg.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	// The one pipeline's augment is run.config.augment as written: axes
	// 1, 2, 3 are the czyx image's z, y, x.
	wantAug := &pipeline.Augment{Seed: 1, Flip: []pipeline.AxisChance{{Axis: 1, P: 0.5}, {Axis: 2, P: 0.5}, {Axis: 3, P: 0.5}},
		Rot90: []pipeline.PlaneChance{{Axes: [2]int{2, 3}, P: 0.5}}, Mean: 16384, Std: 21000}
	if diff := cmp.Diff(wantAug, cfg.Augment); diff != "" {
		t.Errorf("augment (-want +got):\n%s", diff)
	}
	if cfg.Dtype != pipeline.BF16 || !slices.Equal(cfg.SampleShape, []int{1, 128, 128, 128}) || cfg.BatchSize != 16 || !sc.Run.Compare {
		t.Errorf("dtype %v, sample shape %v, batch %d, compare %v", cfg.Dtype, cfg.SampleShape, cfg.BatchSize, sc.Run.Compare)
	}
	// One pipeline per source: the label alone reads the z, y, x box with
	// the same flips and turns on its own axes, and no intensity map.
	apart := apartConfigs(sc)
	if len(apart) != 2 {
		t.Fatalf("%d apart configs", len(apart))
	}
	lab := apart[1]
	wantLab := &pipeline.Augment{Seed: 1, Flip: []pipeline.AxisChance{{Axis: 0, P: 0.5}, {Axis: 1, P: 0.5}, {Axis: 2, P: 0.5}},
		Rot90: []pipeline.PlaneChance{{Axes: [2]int{1, 2}, P: 0.5}}}
	if diff := cmp.Diff(wantLab, lab.Augment); diff != "" {
		t.Errorf("the label's augment (-want +got):\n%s", diff)
	}
	wantSrc := []pipeline.Source{{Name: "label", Dtype: pipeline.U8, HostBufferBytes: 768 << 20, DeviceBufferBytes: 512 << 20}}
	if !slices.Equal(lab.SampleShape, []int{128, 128, 128}) || lab.MaxGPUMemoryBytes != cfg.MaxGPUMemoryBytes/2 || !cmp.Equal(lab.Sources, wantSrc) || lab.Dtype != pipeline.U8 {
		t.Errorf("the label's pipeline: shape %v, cap %d (of %d), sources %v, dtype %v", lab.SampleShape, lab.MaxGPUMemoryBytes, cfg.MaxGPUMemoryBytes, lab.Sources, lab.Dtype)
	}
	// The image alone: the same axes, the intensity transform named on it.
	wantImg := *wantAug
	wantImg.IntensitySources = []string{"image"}
	if diff := cmp.Diff(&wantImg, apart[0].Augment); diff != "" {
		t.Errorf("the image's augment alone (-want +got):\n%s", diff)
	}
	var text strings.Builder
	(&Report{Augment: sc.augmentReport()}).WriteText(&text)
	if want := "augment      flip z p=0.5, flip y p=0.5, flip x p=0.5, rot90 y-x p=0.5, (v - 16384) / 21000 (seed 1)\n"; !strings.Contains(text.String(), want) {
		t.Errorf("the text report gives the augment as\n%s\nwant %q", text.String(), want)
	}
}

// TestApartAugmentAxes: one pipeline per source maps run.config.augment's
// axes, the image's, to each source's own (the label's z, y, x are the
// czyx image's 1, 2, 3), and gives the intensity transform only to the
// sources it names.
func TestApartAugmentAxes(t *testing.T) {
	sc := segFile(t, t.TempDir(), `"flip": [{"axis": 1, "p": 0.5}, {"axis": 2, "p": 0.5}, {"axis": 3, "p": 0.5}],
                                 "rot90": [{"axes": [2, 3], "p": 0.5}], "mean": 16384, "std": 21000`,
		`"flip": [{"axis": 3, "p": 0.25}], "rot90": [{"axes": [3, 2], "p": 0.5}], "permute": [{"axes": [2, 3], "p": 0.75}],
		 "scale": [0.9, 1.1], "clip": [-3, 3], "intensity_sources": ["label"]`,
		`"label": "cells", "dtype": "u8"`, `"label": "cells", "dtype": "f32"`)
	one := &pipeline.Augment{Seed: 1, Flip: []pipeline.AxisChance{{Axis: 3, P: 0.25}}, Rot90: []pipeline.PlaneChance{{Axes: [2]int{3, 2}, P: 0.5}},
		Permute: []pipeline.AxesChance{{Axes: []int{2, 3}, P: 0.75}}, Scale: [2]float64{0.9, 1.1}, Clip: true, ClipLow: -3, ClipHigh: 3,
		IntensitySources: []string{"label"}}
	if diff := cmp.Diff(one, pipelineConfig(sc).Augment); diff != "" {
		t.Errorf("the one pipeline's augment (-want +got):\n%s", diff)
	}
	apart := apartConfigs(sc)
	img := &pipeline.Augment{Seed: 1, Flip: one.Flip, Rot90: one.Rot90, Permute: one.Permute}
	lab := &pipeline.Augment{Seed: 1, Flip: []pipeline.AxisChance{{Axis: 2, P: 0.25}}, Rot90: []pipeline.PlaneChance{{Axes: [2]int{2, 1}, P: 0.5}},
		Permute: []pipeline.AxesChance{{Axes: []int{1, 2}, P: 0.75}}, Scale: [2]float64{0.9, 1.1}, Clip: true, ClipLow: -3, ClipHigh: 3,
		IntensitySources: []string{"label"}}
	if len(apart) != 2 {
		t.Fatalf("%d apart configs", len(apart))
	}
	if diff := cmp.Diff(img, apart[0].Augment); diff != "" {
		t.Errorf("the image's augment alone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(lab, apart[1].Augment); diff != "" {
		t.Errorf("the label's augment alone (-want +got):\n%s", diff)
	}
	// The report: the axes named in the text; in the JSON as
	// run.config.augment spells it, which the decoder reads back.
	ar := sc.augmentReport()
	if got, want := ar.String(), "flip x p=0.25, rot90 x-y p=0.5, permute y-x p=0.75, scale 0.9..1.1, clip -3..3, intensity on label (seed 1)"; got != want {
		t.Errorf("augment text %q; want %q", got, want)
	}
	b, err := json.Marshal(ar)
	if err != nil {
		t.Fatal(err)
	}
	back, err := pipeline.DecodeConfig([]byte(`{"augment": ` + string(b) + `}`))
	if err != nil || !cmp.Equal(back.Augment, one) {
		t.Errorf("the report's augment %s decodes as %+v, %v; want %+v", b, back.Augment, err, one)
	}
}

// TestAugmentRangesArePipelines: what of run.config.augment depends on
// neither the dataset nor the bench's sources (probabilities, equal
// extents, intensity ranges) the scenario leaves to pipeline.New, whose
// error names the field.
func TestAugmentRangesArePipelines(t *testing.T) {
	for _, tt := range []struct{ old, new, want string }{
		{`{"axis": 1, "p": 0.5}`, `{"axis": 1, "p": 2}`, `Config.Augment.Flip[0]`},
		{`"rot90": [{"axes": [2, 3], "p": 0.5}]`, `"rot90": [{"axes": [1, 3], "p": 0.5}]`, `Config.Augment.Rot90[0]`},
		{`"mean": 16384, "std": 21000`, `"scale": [2, 1]`, `Config.Augment.Scale`},
	} {
		sc := segFile(t, t.TempDir(), tt.old, tt.new)
		cfg := pipelineConfig(sc)
		p, err := pipeline.New(cfg)
		if err == nil {
			p.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: pipeline.New: %v; want an error naming %s", tt.new, err, tt.want)
		}
	}
}
