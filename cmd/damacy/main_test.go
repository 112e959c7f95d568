package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// TestMain leaves nothing in /dev/shm once the tests are over (cudatest.Main).
func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

// runCmd runs the command in-process and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustRun runs the command and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	code, out, errs := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("damacy %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out, errs
}

type usageTest struct {
	args []string
	want string // in stderr
}

var usageTests = []usageTest{
	{[]string{"nosuch"}, `unknown command "nosuch"`},
	{[]string{"help", "nosuch"}, `unknown command "nosuch"`},
	{[]string{"info", "extra"}, "usage: damacy info"},
	{[]string{"info", "--nosuch"}, "flag provided but not defined: -nosuch"},
	{[]string{"inspect"}, "usage: damacy inspect"},
	{[]string{"inspect", "a", "b"}, "want one path, got 2"},
	{[]string{"read", "x", "-o", "y.npy"}, "--box is required"},
	{[]string{"read", "x", "--box", "0:4"}, "-o is required"},
	{[]string{"read", "x", "--box", "4:1", "-o", "y.npy"}, `"4:1" is empty`},
	{[]string{"read", "x", "--box", "0:4,a", "-o", "y.npy"}, `"a" is not START:STOP`},
	{[]string{"read", "x", "--box", "0:4", "-o", "y.npy", "--dtype", "f64"}, `--dtype "f64"`},
	{[]string{"read", "x", "--box", "0:4", "-o", "y.npy", "--engine", "tpu"}, `--engine "tpu"`},
	{[]string{"read", "x", "--box", "0:4", "-o", "y.npy", "--engine", "host"}, "--engine applies to --dtype f32 and bf16 only"},
	{[]string{"read", "x", "--box", "0:4", "-o", "y.npy", "--level", "-1"}, "--level -1"},
	{[]string{"gen", "smoke"}, "want a scenario and a directory, got 1"},
	{[]string{"gen", "--shape", "1,x", "smoke", "d"}, `invalid value "1,x" for flag -shape`},
	{[]string{"gen", "--entropy", "2", "smoke", "d"}, "dataset.entropy: 2: must be in [0, 1] (after the flags)"},
	{[]string{"gen", "--chunk", "32,128", "smoke", "d"}, "dataset.chunk: has 2 axes; dataset.shape has 3"},
	{[]string{"bench"}, "want one scenario or array, got 0"},
	{[]string{"bench", "--nosuch", "smoke"}, "flag provided but not defined: -nosuch"},
	{[]string{"bench", "--engine", "tpu", "smoke"}, `--engine "tpu"`},
	{[]string{"bench", "--io-concurrency", "-1", "smoke"}, "--io-concurrency -1: must be in 1..4096"},
	{[]string{"bench", "--link", "10", "smoke"}, "--link link \"10\": the round trip must be a duration"},
	{[]string{"bench", "--link", "10ms,10GB", "smoke"}, `rate "10GB": want a positive number of bits per second`},
	{[]string{"bench", "--remote-gap", "2GiB", "smoke"}, "--remote-gap 2.15 GB: must be at most 1 GiB"},
	{[]string{"bench", "--remote-span", "x", "smoke"}, `invalid value "x" for flag -remote-span`},
	{[]string{"gen", "--local", "x", "smoke", "d"}, "--local is for an s3:// destination; d is a directory"},
	{[]string{"demo", "extra"}, "usage: damacy demo"},
	{[]string{"version", "extra"}, "usage: damacy version"},
	{[]string{"--version", "--nosuch"}, "flag provided but not defined: -nosuch"},
	{[]string{"demo", "--engine", "x"}, `--engine "x"`},
}

func TestUsageErrors(t *testing.T) {
	for i := range usageTests {
		tt := &usageTests[i]
		code, out, errs := runCmd(t, tt.args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, tt.want) {
			t.Errorf("damacy %s = exit %d, stdout %q, stderr %q; want exit 2, no stdout, stderr containing %q",
				strings.Join(tt.args, " "), code, out, errs, tt.want)
		}
		if code == exitUsage && !strings.Contains(errs, "usage") {
			t.Errorf("damacy %s: stderr %q has no usage hint", strings.Join(tt.args, " "), errs)
		}
	}
}

func TestHelp(t *testing.T) {
	out, _ := mustRun(t)
	for _, c := range commands() {
		if !strings.Contains(out, "\n  "+c.name+" ") {
			t.Errorf("damacy help does not list %s:\n%s", c.name, out)
		}
	}
	if !strings.Contains(out, "exit codes:") {
		t.Errorf("damacy help does not document the exit codes:\n%s", out)
	}
	for _, c := range commands() {
		out, _ := mustRun(t, "help", c.name)
		if !strings.HasPrefix(out, "usage: damacy "+c.name) {
			t.Errorf("damacy help %s starts %q", c.name, out[:min(len(out), 40)])
		}
	}
	out, _ = mustRun(t, "help", "bench")
	for _, field := range []string{"batch_size", "sample_shape", "lookahead_batches", "max_gpu_memory_bytes", "n_io_threads", "\"config\"", "hold_ms", "entropy", "throughput", "smoke"} {
		if !strings.Contains(out, field) {
			t.Errorf("damacy help bench does not mention %s", field)
		}
	}
	// -h after a command prints its help and succeeds.
	out, _ = mustRun(t, "inspect", "-h")
	if !strings.Contains(out, "-json") {
		t.Errorf("damacy inspect -h does not list its flags:\n%s", out)
	}
}

func TestInterspersedFlags(t *testing.T) {
	dir := t.TempDir()
	makeStores(t, dir)
	a, _ := mustRun(t, "inspect", "--json", dir+"/plain.zarr")
	b, _ := mustRun(t, "inspect", dir+"/plain.zarr", "--json")
	if a != b || !strings.HasPrefix(a, "{") {
		t.Errorf("flags before and after the path differ:\n%s\n%s", a, b)
	}
}

func TestInspectErrors(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCmd(t, "inspect", dir+"/nosuch")
	if code != exitError || out != "" || !strings.Contains(errs, "nosuch") || strings.Count(errs, "\n") != 1 {
		t.Errorf("inspect of a missing path = exit %d, stdout %q, stderr %q; want exit 1 and one line naming the path", code, out, errs)
	}
}

func TestInfo(t *testing.T) {
	out, _ := mustRun(t, "info")
	for _, w := range []string{"driver:", "nvcomp:", "engine:"} {
		if !strings.Contains(out, w) {
			t.Errorf("info output lacks %q:\n%s", w, out)
		}
	}
	out, _ = mustRun(t, "info", "--json")
	var r hostInfo
	if err := jsonUnmarshalStrict([]byte(out), &r); err != nil {
		t.Fatalf("info --json: %v\n%s", err, out)
	}
	if r.Driver == nil && r.DriverError == "" {
		t.Errorf("info --json: neither a driver nor the reason there is none")
	}
	if r.Engine == "" && r.EngineError == "" {
		t.Errorf("info --json: no engine and no reason")
	}
	if !r.NVCOMP.Loaded && len(r.NVCOMP.Attempts) == 0 && r.NVCOMP.Error == "" {
		t.Errorf("info --json: nvCOMP not loaded and no attempts listed")
	}
}

func TestPCIeGen(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"32.0 GT/s PCIe", "Gen5"}, {"16.0 GT/s PCIe", "Gen4"}, {"8.0 GT/s PCIe", "Gen3"},
		{"2.5 GT/s PCIe", "Gen1"}, {"Unknown", ""}, {"", ""},
	} {
		if got := pcieGen(tt.in); got != tt.want {
			t.Errorf("pcieGen(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// mustHavePython returns the cross-check interpreter, or skips the test
// (fails it when DAMACY_REQUIRE_PYTHON=1).
func mustHavePython(t *testing.T) string {
	t.Helper()
	return zarrtest.MustHavePython(t, "numpy", "zarr", "tensorstore")
}
