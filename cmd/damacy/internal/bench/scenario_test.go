package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/google/go-cmp/cmp"
)

// validScenario is a small valid scenario that the bad-field cases edit.
const validScenario = `{
  "name": "t",
  "dataset": {"arrays": 2, "shape": [16, 64, 64], "chunk": [8, 32, 32], "shard": [16, 64, 64],
              "dtype": "uint16", "codec": "zstd", "level": 3, "entropy": 0.5, "seed": 1},
  "run": {"config": {"batch_size": 2, "sample_shape": [8, 32, 32], "dtype": "f32",
                     "lookahead_batches": 2, "n_io_threads": 2, "max_gpu_memory_bytes": "64MiB"},
          "batches": 2, "warmup": 1, "hold_ms": 0, "engine": "host", "seed": 1}
}`

type badScenarioTest struct {
	old, new string // replace old with new in validScenario
	want     string // the error, after "FILE: "
}

var badScenarioTests = []badScenarioTest{
	{`"name": "t",`, `"name": "t", "nmae": 1,`, `nmae: unknown field`},
	{`"arrays": 2,`, `"arrays": 2, "chunks": [1],`, `dataset.chunks: unknown field`},
	{`"batches": 2,`, `"batches": 2, "batchsize": 2,`, `run.batchsize: unknown field`},
	{`"batch_size": 2,`, `"batch_size": 2, "batchsize": 2,`, `unknown keys in run.config: batchsize`},
	{`"config": {`, `"io_threads": 2, "config": {`, `run.io_threads: unknown field`},
	{`"config": {"batch_size": 2, "sample_shape": [8, 32, 32], "dtype": "f32",
                     "lookahead_batches": 2, "n_io_threads": 2, "max_gpu_memory_bytes": "64MiB"},`, ``, `run.config: missing`},
	{`"arrays": 2,`, `"arrays": "2",`, `dataset.arrays: cannot use a JSON string here (want an integer)`},
	{`"batches": 2,`, `"batches": 2.5,`, `run.batches: cannot use a JSON number 2.5 here (want an integer)`},
	{`"shape": [16, 64, 64]`, `"shape": [16, 64, "x"]`, `dataset.shape`},
	{`"arrays": 2,`, `"arrays": 0,`, `dataset.arrays: 0: must be in 1..100000`},
	{`"shape": [16, 64, 64]`, `"shape": [16]`, `dataset.shape: rank 1: want 2 to 5 axes`},
	{`"shape": [16, 64, 64]`, `"shape": [16, 0, 64]`, `dataset.shape[1]: 0: must be positive`},
	{`"chunk": [8, 32, 32]`, `"chunk": [8, 32]`, `dataset.chunk: has 2 axes; dataset.shape has 3`},
	{`"shard": [16, 64, 64]`, `"shard": [16, 48, 64]`, `dataset.shard[1]: 48 is not a multiple of dataset.chunk[1] = 32`},
	{`"dtype": "uint16"`, `"dtype": "uint12"`, `dataset.dtype: "uint12" is not a supported zarr data type`},
	{`"dtype": "uint16"`, `"dtype": ["uint8", "complex64"]`, `dataset.dtype[1]: "complex64"`},
	{`"dtype": "uint16"`, `"dtype": 16`, `dataset.dtype: want a string or a list of strings`},
	{`"codec": "zstd"`, `"codec": "brotli"`, `dataset.codec: "brotli" is not a codec`},
	{`"codec": "zstd"`, `"codec": ["zstd", "blosc-snappy"]`, `dataset.codec[1]: "blosc-snappy" is not a codec`},
	{`"level": 3,`, `"level": 40,`, `dataset.level: 40: out of range for zstd`},
	{`"level": 3,`, `"level": 3, "shuffle": "byte",`, `dataset.shuffle: applies to blosc codecs only`},
	{`"codec": "zstd"`, `"codec": "blosc-lz4", "shuffle": "bytes"`, `dataset.shuffle: "bytes": want none, byte or bit`},
	{`"entropy": 0.5`, `"entropy": -0.1`, `dataset.entropy: -0.1: must be in [0, 1]`},
	{`"batch_size": 2,`, `"batch_size": 0,`, `run.config.batch_size: 0: must be positive`},
	{`"sample_shape": [8, 32, 32]`, `"sample_shape": [8, 32]`, `run.config.sample_shape: has 2 axes; dataset.shape has 3`},
	{`"sample_shape": [8, 32, 32]`, `"sample_shape": [8, 32, 65]`, `run.config.sample_shape[2]: 65 is larger than dataset.shape[2] = 64`},
	{`"batches": 2,`, `"batches": 0,`, `run.batches: 0: must be at least 1`},
	{`"warmup": 1,`, `"warmup": -1,`, `run.warmup: -1: must not be negative`},
	{`"dtype": "f32"`, `"dtype": "f16"`, `run.config.dtype = "f16"`},
	{`"dtype": "f32"`, `"dtype": "u8"`, `run.config.dtype: uint8: integer outputs are for label sources`},
	{`"n_io_threads": 2,`, `"n_io_threads": "2",`, `run.config.n_io_threads = "2"`},
	{`"max_gpu_memory_bytes": "64MiB"`, `"max_gpu_memory_bytes": "64 bananas"`, `run.config.max_gpu_memory_bytes = "64 bananas"`},
	{`"hold_ms": 0,`, `"hold_ms": -5,`, `run.hold_ms: -5: must be in 0..600000`},
	{`"n_io_threads": 2,`, `"n_io_threads": 2, "chunk_cache_bytes": "lots",`, `run.config.chunk_cache_bytes = "lots"`},
	{`"n_io_threads": 2,`, `"n_io_threads": 2, "augment": {"flip": [{"axis": 3, "p": 0.5}]},`, `run.config.augment.flip[0].axis: 3: want an axis of the image (0 z, 1 y, 2 x)`},
	{`"batches": 2,`, `"batches": 2, "augment": {"seed": 1},`, `run.augment: moved to run.config.augment (pipeline.Augment: axes are numbers, the image's axes in order: 0 z, 1 y, 2 x)`},
	{`"hold_ms": 0,`, `"hold_ms": 0, "epochs": -1,`, `run.epochs: -1: must be in 0..1000`},
	{`"engine": "host"`, `"engine": "tpu"`, `run.engine: "tpu": want auto, host, cuda or cuda:N`},
	{`"name": "t",`, `"name": "a b",`, `name: "a b": use letters, digits`},
	{`"name": "t",`, ``, `name: missing`},
	{`"run": {`, `"nur": {`, `nur: unknown field`},
	{`"warmup": 1,`, `"warmup": 1,,`, `invalid JSON at line 7, column 38`},
	{`"seed": 1}
}`, `"seed": 1}`, `truncated JSON`},
}

// TestBadScenarios: a scenario that cannot be used is one error line
// naming the file and the field at fault.
func TestBadScenarios(t *testing.T) {
	dir := t.TempDir()
	for i := range badScenarioTests {
		tt := &badScenarioTests[i]
		if !strings.Contains(validScenario, tt.old) {
			t.Fatalf("case %d: %q is not in the valid scenario", i, tt.old)
		}
		doc := strings.Replace(validScenario, tt.old, tt.new, 1)
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
}

func TestScenarioNotFound(t *testing.T) {
	_, err := LoadScenario("nosuch-scenario")
	if err == nil || !strings.Contains(err.Error(), "not a built-in scenario") || !strings.Contains(err.Error(), "throughput") {
		t.Errorf("LoadScenario(nosuch-scenario) = %v; want an error naming the built-in scenarios", err)
	}
}

func TestBuiltinScenarios(t *testing.T) {
	want := []string{"bf16", "blosc-lz4", "blosc-zstd", "default", "epochs", "mixed-dtype", "segmentation", "smoke", "throughput", "training", "zarrbench-compressed", "zarrbench-sharded", "zarrbench-uncompressed"}
	if got := BuiltinNames(); !cmp.Equal(got, want) {
		t.Errorf("built-in scenarios = %v; want %v", got, want)
	}
	for _, name := range BuiltinNames() {
		sc, err := LoadScenario(name)
		if err != nil {
			t.Errorf("built-in %s: %v", name, err)
			continue
		}
		if sc.Name != name {
			t.Errorf("built-in %s is named %q", name, sc.Name)
		}
	}
	// damacy's throughput and default scenarios, as its harness runs them.
	tp, err := LoadScenario("throughput")
	if err != nil {
		t.Fatal(err)
	}
	wantTP := Scenario{
		Name: "throughput", Description: tp.Description,
		Dataset: DatasetSpec{Arrays: 16, Shape: []int64{512, 512, 512}, Chunk: []int64{32, 64, 64}, Shard: []int64{256, 256, 512},
			Dtype: NameList{"uint16"}, Codec: NameList{"zstd"}, Level: 3, Entropy: 0.5, Seed: 1},
		Run: RunSpec{Config: pipeline.Config{BatchSize: 128, SampleShape: []int{128, 128, 128}, Dtype: pipeline.F32,
			LookaheadBatches: 4, IOThreads: 16, MaxGPUMemoryBytes: 8 << 30}, Batches: 100, Warmup: 10, Engine: "auto", Seed: 1},
	}
	if diff := cmp.Diff(wantTP, *tp, cmp.AllowUnexported(Scenario{})); diff != "" {
		t.Errorf("throughput scenario (-want +got):\n%s", diff)
	}
	def, err := LoadScenario("default")
	if err != nil {
		t.Fatal(err)
	}
	wantDef := wantTP
	wantDef.Name, wantDef.Description = "default", def.Description
	wantDef.Dataset.Arrays = 8
	wantDef.Run.Batches, wantDef.Run.Warmup, wantDef.Run.Config.IOThreads = 50, 5, 8
	if diff := cmp.Diff(wantDef, *def, cmp.AllowUnexported(Scenario{})); diff != "" {
		t.Errorf("default scenario (-want +got):\n%s", diff)
	}
}

func TestByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"6GiB", 6 << 30, true}, {"512 MiB", 512 << 20, true}, {"1.5GB", 1500000000, true},
		{"100", 100, true}, {"7B", 7, true}, {"1KB", 1000, true},
		{"", 0, false}, {"-1GiB", 0, false}, {"GiB", 0, false}, {"1e400", 0, false},
	} {
		got, err := parseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestDrawBoxes(t *testing.T) {
	sc, err := parseScenario("t", []byte(validScenario))
	if err != nil {
		t.Fatal(err)
	}
	a, b := drawBoxes(sc), drawBoxes(sc)
	if !cmp.Equal(a, b) {
		t.Errorf("the same seed drew different boxes")
	}
	if len(a) != (sc.Run.Warmup+sc.Run.Batches)*sc.Run.Config.BatchSize {
		t.Errorf("drew %d boxes", len(a))
	}
	arrays := map[int]bool{}
	for _, s := range a {
		arrays[s.Array] = true
		for d, r := range s.Box {
			if r[0] < 0 || r[1] > sc.Dataset.Shape[d] || r[1]-r[0] != int64(sc.Run.Config.SampleShape[d]) {
				t.Errorf("box %v is not an in-bounds box of the sample shape", s.Box)
			}
		}
	}
	sc.Run.Seed = 2
	if cmp.Equal(a, drawBoxes(sc)) {
		t.Errorf("seeds 1 and 2 drew the same boxes")
	}
	// Many draws cover every array and every origin of a small axis.
	sc.Run.Batches = 200
	origins := map[int64]bool{}
	for _, s := range drawBoxes(sc) {
		arrays[s.Array] = true
		origins[s.Box[0][0]] = true
	}
	if len(arrays) != sc.Dataset.Arrays || len(origins) != int(sc.Dataset.Shape[0]-int64(sc.Run.Config.SampleShape[0])+1) {
		t.Errorf("400 draws hit %d of %d arrays and %d of %d origins", len(arrays), sc.Dataset.Arrays, len(origins), sc.Dataset.Shape[0]-int64(sc.Run.Config.SampleShape[0])+1)
	}
}
