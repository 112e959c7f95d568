package main

import (
	"bufio"
	"context"
	"errors"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// codeBlock is a fenced code block of a Markdown file.
type codeBlock struct {
	lang string
	line int // of its opening fence
	text string
}

// codeBlocks returns the fenced code blocks of the Markdown file name.
func codeBlocks(t *testing.T, name string) []codeBlock {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []codeBlock
	var cur *codeBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &codeBlock{lang: strings.TrimSpace(line[3:]), line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: code block not closed", name, cur.line)
	}
	return blocks
}

// repoRoot is the repository's top directory, from this package's.
const repoRoot = "../.."

// TestREADME runs the code blocks of the repository's README.md: each Go
// block is built as a program of this module and run where the stores it
// names exist; each shell line runs as a user would type it, where it can
// run inside `make test`. The Python blocks run in the Python package's
// tests (cmd/damacy/python/tests/test_docs.py), against the installed
// wheel. A block in any other language, or a shell line that nothing
// here runs, fails the test.
func TestREADME(t *testing.T) {
	blocks := codeBlocks(t, filepath.Join(repoRoot, "README.md"))
	if len(blocks) == 0 {
		t.Fatal("README.md has no code blocks")
	}
	for _, b := range blocks {
		name := b.lang + ":" + strconv.Itoa(b.line)
		switch b.lang {
		case "go":
			t.Run(name, func(t *testing.T) { runGoBlock(t, b) })
		case "sh":
			for _, cmd := range shellLines(b.text) {
				t.Run(name+":"+cmd, func(t *testing.T) { runShellLine(t, cmd) })
			}
		case "python":
			// tests/test_docs.py of the Python package runs it.
		default:
			t.Errorf("README.md:%d: a %q block: nothing runs it", b.line, b.lang)
		}
	}
}

// shellLines returns the commands of a shell block, without comments.
func shellLines(text string) []string {
	var cmds []string
	for line := range strings.Lines(text) {
		cmd, _, _ := strings.Cut(line, "#")
		if cmd = strings.TrimSpace(cmd); cmd != "" {
			cmds = append(cmds, cmd)
		}
	}
	return cmds
}

// goTool returns the go command, or skips t without one (the GPU host runs
// prebuilt test binaries and has no Go).
func goTool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	return path
}

// readmeImage writes image.zarr, the OME-NGFF image the README's blocks
// read (64 x 256 x 256 uint16, with a uint8 label image labels/cells),
// into a new directory and returns it.
func readmeImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	scenario := filepath.Join(dir, "image.json")
	err := os.WriteFile(scenario, []byte(`{"name": "readme", "dataset": {"arrays": 1, "shape": [64, 256, 256], "chunk": [32, 64, 64],
		"shard": [64, 128, 128], "dtype": "uint16", "codec": "zstd", "level": 3, "entropy": 0.5, "seed": 1,
		"labels": {"name": "cells", "dtype": "uint8", "codec": "zstd", "foreground": 0.1}},
		"run": {"config": {"batch_size": 4, "sample_shape": [32, 64, 64], "dtype": "f32"}, "batches": 1, "seed": 1}}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, "gen", scenario, filepath.Join(dir, "gen"))
	if err := os.Rename(filepath.Join(dir, "gen", "a000"), filepath.Join(dir, "image.zarr")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runGoBlock builds a Go block as a program of this module (a file given
// to go build from the module's directory belongs to it) and runs it in a
// directory holding image.zarr. A block prints the device, the shape and
// the dtype of its batch; the block of several sources, of each of its two
// batches' tensors, and the number of transforms.
func runGoBlock(t *testing.T, b codeBlock) {
	if src, err := format.Source([]byte(b.text)); err != nil || string(src) != b.text {
		t.Errorf("README.md:%d: the Go block is not gofmt's output (%v)", b.line, err)
	}
	gotool := goTool(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(b.text), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(src, "example")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, gotool, "build", "-o", exe, filepath.Join(src, "main.go"))
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("README.md:%d: go build: %v\n%s", b.line, err, out)
	}
	run := exec.CommandContext(ctx, exe)
	run.Dir = readmeImage(t)
	out, err := run.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("README.md:%d: the program failed: %v\n%s", b.line, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^(cpu|cuda:\d+) \[1 64 256 256\] bfloat16\n$`)
	if strings.Contains(b.text, "pipeline.Source{") { // the image and its label, two batches
		want = regexp.MustCompile(`^((cpu|cuda:\d+) \[4 32 32 32\] bfloat16 \[4 32 32 32\] uint8 4\n){2}$`)
	}
	if !want.Match(out) {
		t.Errorf("README.md:%d: the program printed %q, want a match of %s", b.line, out, want)
	}
}

// runShellLine runs one command of a shell block as a user would, or says
// why it cannot run here; a command this test does not know fails it.
func runShellLine(t *testing.T, cmd string) {
	switch cmd {
	case "make test":
		t.Skip("`make test` is the run this test belongs to: it cannot run inside itself (CI runs it through .ci/run)")
	case "make minio":
		if _, err := os.Stat(filepath.Join(repoRoot, ".cache", "minio", "minio")); err != nil {
			t.Skipf("MinIO is not built here (%v): `make minio` would build it from source for minutes; .ci/run runs it before `make test`", err)
		}
		out := runMake(t, "minio")
		if !strings.Contains(out, "minio ") {
			t.Errorf("make minio printed %q", out)
		}
	case "make fake-gcs":
		if _, err := os.Stat(filepath.Join(repoRoot, ".cache", "fake-gcs-server", "fake-gcs-server")); err != nil {
			t.Skipf("fake-gcs-server is not built here (%v): `make fake-gcs` would build it from source for a minute; .ci/run runs it before `make test`", err)
		}
		out := runMake(t, "fake-gcs")
		if !strings.Contains(out, "fake-gcs-server ") {
			t.Errorf("make fake-gcs printed %q", out)
		}
	case "make demo":
		out := runMake(t, "demo")
		if !strings.Contains(out, "checked:     batch 0 equals the reference reader's output") {
			t.Errorf("make demo did not check its batch:\n%s", out)
		}
	default:
		t.Errorf("README.md: the shell line %q: nothing runs it (add it to runShellLine)", cmd)
	}
}

// runMake runs make with target in the repository, as a user would: not
// as a sub-make of the make running this test.
func runMake(t *testing.T, target string) string {
	t.Helper()
	goTool(t) // make's targets run go
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", target)
	cmd.Dir = repoRoot
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, out)
	}
	return string(out)
}
