package main

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const modulePath = "github.com/damacy-go/damacy"

var (
	// sourceFile matches the name of a Go or CUDA source file.
	sourceFile = regexp.MustCompile(`\b[\w*-]+\.(go|cu)\b`)
	// dated matches a date or a GPU model, the marks of a measurement.
	dated = regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b|\b[HAB][1-9]00\b`)
)

// TestDocFiles holds every doc.go of the module to saying what its package
// is for and what it imports: its package doc lists no source files,
// carries no dated or per-GPU measurements (those belong in
// cmd/damacy/BENCH.md), and ends with an "Imports:" paragraph that names
// each package of the module the package imports (by its path in the
// module or its last element), each other module by its name, and the
// standard library when the package uses it.
func TestDocFiles(t *testing.T) {
	n := 0
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repoRoot {
			if strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		if d.IsDir() || d.Name() != "doc.go" {
			return nil
		}
		n++
		rel, err := filepath.Rel(repoRoot, filepath.Dir(p))
		if err != nil {
			return err
		}
		checkDoc(t, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("found no doc.go")
	}
}

// checkDoc checks the package doc in dir/doc.go (dir relative to the
// repository's root) against the package's imports.
func checkDoc(t *testing.T, dir string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot, dir, "doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Errorf("%s/doc.go has no package doc", dir)
		return
	}
	doc := f.Doc.Text()
	if m := sourceFile.FindAllString(doc, -1); m != nil {
		t.Errorf("%s/doc.go names source files %q: say what the package does, not where", dir, m)
	}
	if m := dated.FindAllString(doc, -1); m != nil {
		t.Errorf("%s/doc.go carries dates or GPU models %q: measurements go to cmd/damacy/BENCH.md", dir, m)
	}
	_, imports, ok := strings.Cut(doc, "Imports:")
	if !ok {
		t.Errorf("%s/doc.go does not say what the package imports (no \"Imports:\")", dir)
		return
	}
	imports, _, _ = strings.Cut(imports, "\n\n")
	pkg, err := build.ImportDir(filepath.Join(repoRoot, dir), 0)
	if err != nil {
		t.Fatal(err)
	}
	std := false
	for _, imp := range pkg.Imports {
		var names []string
		elems := strings.Split(imp, "/")
		switch {
		case !strings.Contains(elems[0], "."):
			std = true
			continue
		case strings.HasPrefix(imp, modulePath+"/"):
			rel := strings.TrimPrefix(imp, modulePath+"/")
			names = []string{rel, path.Base(rel)}
		case len(elems) >= 3:
			names = []string{elems[2]} // github.com/owner/NAME/..., golang.org/x/NAME/...
		default:
			names = []string{imp}
		}
		if !mentions(imports, names) {
			t.Errorf("%s/doc.go: Imports: does not name %s (as %s)", dir, imp, strings.Join(names, " or "))
		}
	}
	if std && !strings.Contains(imports, "standard library") {
		t.Errorf("%s/doc.go: Imports: does not name the standard library", dir)
	}
}

// mentions reports whether text names one of names as a word (a package
// path followed by "/" is a longer path, not this one).
func mentions(text string, names []string) bool {
	for _, name := range names {
		if regexp.MustCompile(`(^|\W)` + regexp.QuoteMeta(name) + `($|[^\w/])`).MatchString(text) {
			return true
		}
	}
	return false
}
