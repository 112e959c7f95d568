package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
)

var cmdVersion = &command{
	name:  "version",
	usage: "version [--json]",
	short: "show the release, the build (module, VCS revision, Go) and the nvCOMP it would load",
	long: `Version says which build this is, for a bug report: the release number
(the version of the Python package damacy, whose wheel carries this binary:
both come from cmd/damacy/python/damacy/_version.py), the Go module and its
version, the VCS revision the binary was built from and whether that tree
had uncommitted changes, the Go toolchain and platform, and the nvCOMP
library a pipeline would load (version and file, or every place it was
looked for and why each failed). It does not touch the GPU.
'damacy --version' is the same command.

A build that recorded no VCS information (go build -buildvcs=false, a
build outside a git checkout, go install of a module version) says that
the revision is unknown; the module version then names the source.`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		asJSON := fs.Bool("json", false, "write JSON instead of text")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 0 {
				return usagef("takes no arguments, got %d", len(args))
			}
			b := currentBuild()
			b.NVCOMP = gatherNVCOMP()
			if *asJSON {
				return writeJSON(e.stdout, b)
			}
			b.writeText(e.stdout)
			return nil
		}
	},
}

// versionFile is the Python package's version module, the one place the
// release number is written: build_wheel.py reads it for the wheel, and
// this binary carries it (build_wheel.py checks that the binary it packs
// carries the same one).
//
//go:embed python/damacy/_version.py
var versionFile string

// releasePattern finds the release in versionFile; build_wheel.py uses the
// same expression.
var releasePattern = regexp.MustCompile(`(?m)^__version__ = "([^"]+)"$`)

// release returns the release number that versionFile assigns to
// __version__, or "(unknown)" when it assigns none.
func release() string {
	m := releasePattern.FindStringSubmatch(versionFile)
	if m == nil {
		return "(unknown)"
	}
	return m[1]
}

// buildInfo is what version reports.
type buildInfo struct {
	Version       string     `json:"version"`                 // the release, damacy.__version__ of the wheel
	Module        string     `json:"module"`                  // the main module's path
	ModuleVersion string     `json:"module_version"`          // "(devel)" for a build in the module's own tree
	Revision      string     `json:"revision,omitempty"`      // the VCS commit, when the build recorded it
	RevisionTime  string     `json:"revision_time,omitempty"` // the commit's time, RFC 3339
	Modified      bool       `json:"modified"`                // the tree had uncommitted changes
	Go            string     `json:"go"`                      // the toolchain, "go1.26.0"
	Platform      string     `json:"platform"`                // GOOS/GOARCH, "linux/amd64"
	NVCOMP        nvcompInfo `json:"nvcomp"`
}

// currentBuild describes this binary, without nvCOMP.
func currentBuild() *buildInfo {
	bi, _ := debug.ReadBuildInfo() // nil without build information
	return describeBuild(release(), bi)
}

// describeBuild describes a build of release rel from its build
// information, which is nil when the binary carries none.
func describeBuild(rel string, bi *debug.BuildInfo) *buildInfo {
	b := &buildInfo{
		Version:       rel,
		Module:        "(unknown)",
		ModuleVersion: "(unknown)",
		Go:            runtime.Version(),
		Platform:      runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi == nil {
		return b
	}
	if bi.Main.Path != "" {
		b.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		b.ModuleVersion = bi.Main.Version
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.RevisionTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the release with the revision's first 12 digits when known,
// "0.1.0 (7f6c31a9d7eb, modified)": the first line of version's text
// after "damacy ", and the server's version in the hello of damacy serve.
func (b *buildInfo) String() string {
	if b.Revision == "" {
		return b.Version
	}
	rev := b.Revision[:min(len(b.Revision), 12)]
	if b.Modified {
		rev += ", modified"
	}
	return b.Version + " (" + rev + ")"
}

func (b *buildInfo) writeText(w io.Writer) {
	fmt.Fprintf(w, "damacy %s\n", b)
	fmt.Fprintf(w, "module:   %s %s\n", b.Module, b.ModuleVersion)
	rev := "unknown (the build recorded no VCS information)"
	if b.Revision != "" {
		rev = b.Revision
		if b.RevisionTime != "" {
			rev += " of " + b.RevisionTime
		}
		if b.Modified {
			rev += ", with uncommitted changes"
		}
	}
	fmt.Fprintf(w, "revision: %s\n", rev)
	fmt.Fprintf(w, "go:       %s %s\n", b.Go, b.Platform)
	b.NVCOMP.writeText(w)
}
