package pipeline

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeConfig(t *testing.T) {
	cfg, err := DecodeConfig([]byte(`{"batch_size": 8, "sample_shape": [4, 4], "dtype": "bf16", "on_error": "skip",
		"n_io_threads": 16, "host_buffer_bytes": "64MiB", "device_buffer_bytes": 2097152, "mapped_file_bytes": "off",
		"chunk_cache_bytes": "1GiB", "lookahead_batches": null,
		"sources": [{"name": "image"}, {"name": "label", "label": "nuclei", "dtype": "uint8", "host_buffer_bytes": "2MiB"}],
		"augment": {"seed": 7, "flip": [{"axis": 1, "p": 0.5}], "rot90": [{"axes": [0, 1], "p": 1}],
			"permute": [{"axes": [0, 1], "p": 0.25}], "scale": [0.9, 1.1], "clip": [0, 1], "intensity_sources": ["image"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{BatchSize: 8, SampleShape: []int{4, 4}, Dtype: BF16, OnError: OnErrorSkip, IOThreads: 16,
		HostBufferBytes: 64 << 20, DeviceBufferBytes: 2 << 20, MappedFileBytes: -1, ChunkCacheBytes: 1 << 30,
		Sources: []Source{{Name: "image"}, {Name: "label", Label: "nuclei", Dtype: U8, HostBufferBytes: 2 << 20}},
		Augment: &Augment{Seed: 7, Flip: []AxisChance{{1, 0.5}}, Rot90: []PlaneChance{{[2]int{0, 1}, 1}},
			Permute: []AxesChance{{[]int{0, 1}, 0.25}}, Scale: [2]float64{0.9, 1.1}, Clip: true, ClipLow: 0, ClipHigh: 1,
			IntensitySources: []string{"image"}}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("DecodeConfig\n = %+v\nwant %+v", cfg, want)
	}
	for _, tt := range []struct{ in, want string }{
		{`{"io_threads": 4, "gpu_cap": 1}`, "unknown keys in config: gpu_cap, io_threads"},
		{`{"batch_size": "8"}`, `config.batch_size = "8": must be an integer`},
		{`{"host_buffer_bytes": "lots"}`, `config.host_buffer_bytes = "lots": must be a byte count`},
		{`{"dtype": "f16"}`, `config.dtype = "f16": must be a dtype name`},
		{`{"on_error": "ignore"}`, `config.on_error = "ignore": must be "raise" or "skip"`},
		{`{"sample_shape": [1, 2.5]}`, `config.sample_shape = [1,2.5]: must be a list of integers`},
		{`{"sources": [{"name": "a"}, {"name": "b", "dtpye": "u8"}]}`, "unknown keys in config.sources[1]: dtpye"},
		{`{"sources": [{"name": "a", "dtype": 3}]}`, "config.sources[0].dtype = 3"},
		{`{"augment": {"flip": [{"axis": "x"}]}}`, `config.augment.flip[0].axis = "x": must be an integer`},
		{`{"augment": {"clip": [1]}}`, "config.augment.clip = [1]: must be [low, high]"},
		{`{"device": "cpu"}`, "unknown keys in config: device"},
		{`[1]`, "config = [1]: must be an object"},
	} {
		_, err := DecodeConfig([]byte(tt.in))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeConfig(%s): %v, want ErrInvalid saying %q", tt.in, err, tt.want)
		}
	}
}

func TestConfigJSONNames(t *testing.T) {
	for _, tt := range []struct {
		v           any
		field, want string
	}{{Config{}, "IOThreads", "n_io_threads"}, {Config{}, "MaxChunkBytes", "max_chunk_uncompressed_bytes"},
		{&Source{}, "HostBufferBytes", "host_buffer_bytes"}, {Augment{}, "ClipHigh", "clip"}, {Augment{}, "IntensitySources", "intensity_sources"}} {
		if got, ok := JSONName(tt.v, tt.field); !ok || got != tt.want {
			t.Errorf("JSONName(%T, %s) = %q, %v; want %q", tt.v, tt.field, got, ok, tt.want)
		}
	}
	for _, f := range []string{"Trace", "Logger", "Remote", "Device", "Nope"} {
		if got, ok := JSONName(Config{}, f); ok {
			t.Errorf("JSONName(Config, %s) = %q, want none", f, got)
		}
	}
}
