package serve

import (
	"strings"
	"testing"
)

func TestPythonNames(t *testing.T) {
	tests := []struct{ in, want string }{
		{"chunk c/0/0/0@0 decodes to 33554432 bytes, above Config.MaxChunkBytes = 8388608: raise it to at least 33554432",
			"chunk c/0/0/0@0 decodes to 33554432 bytes, above Config.max_chunk_uncompressed_bytes = 8388608: raise it to at least 33554432"},
		{"a wave has 16 of Config.DeviceBufferBytes = 16: raise Config.DeviceBufferBytes to at least 32",
			"a wave has 16 of Config.device_buffer_bytes = 16: raise Config.device_buffer_bytes to at least 32"},
		{"Config.IOThreads = -1: must be in 1..1024", "Config.n_io_threads = -1: must be in 1..1024"},
		{"Config.ShardIndexCache = -1", "Config.n_shards_meta_cache = -1"},
		{"Config.Sources[1].HostBufferBytes = 5: must be", "Config.sources[1].host_buffer_bytes = 5: must be"},
		{"Config.Augment.IntensitySources = x", "Config.augment.intensity_sources = x"},
		{"Config.Augment.Rot90[0] = {}", "Config.augment.rot90[0] = {}"},
		{"Config.SampleShape[2] = 0", "Config.sample_shape[2] = 0"},
		// Fields hello cannot set keep their Go names.
		{"Config.Trace must be fast", "Config.Trace must be fast"},
		{"Config.Remote: bad endpoint", "Config.Remote: bad endpoint"},
		{"MyConfig.BatchSize", "MyConfig.BatchSize"},
	}
	for _, tt := range tests {
		if got := pythonNames(tt.in); got != tt.want {
			t.Errorf("pythonNames(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// TestBudgetErrorNamesPythonField runs the protocol with configs that
// cannot hold the chunks of the array pushed: hello's and the pop's errors
// name the config keys the client set, not pipeline.Config's fields.
func TestBudgetErrorNamesPythonField(t *testing.T) {
	path, _ := testArray(t, t.TempDir()) // 8^3 uint16 chunks of 1 KiB
	box := [][][2]int64{{{0, 4}, {0, 4}, {0, 4}}}
	for _, tt := range []struct {
		name   string
		config map[string]any
		op     string // the op that fails
		want   string
	}{
		{"max chunk", map[string]any{"max_chunk_uncompressed_bytes": 512}, "pop",
			"above Config.max_chunk_uncompressed_bytes = 512: raise it to at least 1024"},
		{"max chunk at hello", map[string]any{"max_chunk_uncompressed_bytes": 4 << 20, "device_buffer_bytes": 2 << 20}, "hello",
			"Config.device_buffer_bytes = 2097152 cannot hold one chunk of Config.max_chunk_uncompressed_bytes = 4194304: raise Config.device_buffer_bytes to at least 4194304"},
		{"bad value", map[string]any{"lookahead_batches": 1}, "hello", "Config.lookahead_batches = 1: must be in 2..64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := startServe(t)
			cfg := hostConfig()
			delete(cfg, "max_chunk_uncompressed_bytes")
			for k, v := range tt.config {
				cfg[k] = v
			}
			m := c.call("hello", hello(cfg))
			if tt.op == "pop" {
				mustOK(t, "hello", m)
				mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, box)}))
				mustOK(t, "flush", c.call("flush", nil))
				m = c.call("pop", nil)
			}
			status := statusBudget
			if tt.name == "bad value" {
				status = statusInval
			}
			e := wantError(t, tt.op, m, status)
			if !strings.Contains(e.Message, tt.want) || strings.Contains(e.Message, "Bytes") || strings.Contains(e.Message, "Batches") {
				t.Errorf("%s error %q\nwant it to say %q, with no Go field name", tt.op, e.Message, tt.want)
			}
		})
	}
}
