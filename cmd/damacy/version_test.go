package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// packageVersion reads __version__ from the Python package the way a
// reader of _version.py would, independently of release's expression.
func packageVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("python/damacy/_version.py")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "__version__ = "); ok {
			return strings.Trim(v, `"'`)
		}
	}
	t.Fatal("python/damacy/_version.py assigns no __version__")
	return ""
}

// TestVersion runs damacy version and --version: the release they print is
// the Python package's __version__, and every part of the report is there.
func TestVersion(t *testing.T) {
	want := packageVersion(t)
	if got := release(); got != want {
		t.Fatalf("release() = %q; want %q, the Python package's __version__", got, want)
	}
	out, _ := mustRun(t, "version")
	if alias, _ := mustRun(t, "--version"); alias != out {
		t.Errorf("damacy --version printed\n%s\nwant what damacy version prints:\n%s", alias, out)
	}
	lines := strings.Split(out, "\n")
	if first := lines[0]; first != "damacy "+want && !strings.HasPrefix(first, "damacy "+want+" (") {
		t.Errorf("damacy version starts %q; want \"damacy %s\"", first, want)
	}
	for _, w := range []string{"\nmodule:   github.com/damacy-go/damacy ", "\nrevision: ", "\ngo:       " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n", "\nnvcomp:   "} {
		if !strings.Contains(out, w) {
			t.Errorf("damacy version lacks %q:\n%s", w, out)
		}
	}

	out, _ = mustRun(t, "version", "--json")
	var b buildInfo
	if err := jsonUnmarshalStrict([]byte(out), &b); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if b.Version != want || b.Module != "github.com/damacy-go/damacy" || b.Go != runtime.Version() {
		t.Errorf("version --json = %+v; want version %q, the module's path and %s", b, want, runtime.Version())
	}
	if !b.NVCOMP.Loaded && b.NVCOMP.Error == "" {
		t.Errorf("version --json: nvCOMP not loaded and no reason given")
	}
}

type describeTest struct {
	name     string
	bi       *debug.BuildInfo
	str      string   // String()
	contains []string // in writeText's output
}

var vcsSettings = []debug.BuildSetting{
	{Key: "-trimpath", Value: "true"},
	{Key: "vcs", Value: "git"},
	{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
	{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
}

var describeTests = []describeTest{
	{
		name:     "no build information",
		str:      "1.2.3",
		contains: []string{"damacy 1.2.3\n", "module:   (unknown) (unknown)\n", "revision: unknown (the build recorded no VCS information)\n"},
	},
	{
		name: "clean checkout",
		bi: &debug.BuildInfo{
			GoVersion: "go1.99.1",
			Main:      debug.Module{Path: "example.com/damacy", Version: "v0.0.0-20260102030405-0123456789ab"},
			Settings:  slices.Concat(vcsSettings, []debug.BuildSetting{{Key: "vcs.modified", Value: "false"}}),
		},
		str: "1.2.3 (0123456789ab)",
		contains: []string{
			"damacy 1.2.3 (0123456789ab)\n",
			"module:   example.com/damacy v0.0.0-20260102030405-0123456789ab\n",
			"revision: 0123456789abcdef0123456789abcdef01234567 of 2026-01-02T03:04:05Z\n",
			"go:       go1.99.1 ",
		},
	},
	{
		name: "modified tree",
		bi: &debug.BuildInfo{
			Main:     debug.Module{Path: "example.com/damacy", Version: "(devel)"},
			Settings: slices.Concat(vcsSettings, []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}),
		},
		str: "1.2.3 (0123456789ab, modified)",
		contains: []string{
			"damacy 1.2.3 (0123456789ab, modified)\n",
			"module:   example.com/damacy (devel)\n",
			"revision: 0123456789abcdef0123456789abcdef01234567 of 2026-01-02T03:04:05Z, with uncommitted changes\n",
			"go:       " + runtime.Version() + " ",
		},
	},
	{
		name: "module version without VCS information",
		bi: &debug.BuildInfo{
			Main:     debug.Module{Path: "example.com/damacy", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}},
		},
		str:      "1.2.3",
		contains: []string{"damacy 1.2.3\n", "module:   example.com/damacy v1.2.3\n", "revision: unknown (the build recorded no VCS information)\n"},
	},
}

func TestDescribeBuild(t *testing.T) {
	for i := range describeTests {
		tt := &describeTests[i]
		b := describeBuild("1.2.3", tt.bi)
		if got := b.String(); got != tt.str {
			t.Errorf("%s: String() = %q; want %q", tt.name, got, tt.str)
		}
		var w strings.Builder
		b.writeText(&w)
		for _, c := range tt.contains {
			if !strings.Contains(w.String(), c) {
				t.Errorf("%s: text lacks %q:\n%s", tt.name, c, w.String())
			}
		}
	}
}
