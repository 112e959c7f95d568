package pyembed

import (
	"errors"
	"os"
	"sync"
	"testing"
)

// Environment variables shared with the module's other Python-based tests.
const (
	pythonEnv  = "DAMACY_PYTHON"         // the interpreter to use
	requireEnv = "DAMACY_REQUIRE_PYTHON" // "1": a missing or broken interpreter fails the test
)

// shared is the process's interpreter for tests, started on first use:
// CPython allows one per process, so every test shares it.
var shared = sync.OnceValues(func() (*Interpreter, error) {
	py := os.Getenv(pythonEnv)
	if py == "" {
		return nil, errors.New("pyembed: " + pythonEnv + " is not set")
	}
	return Start(py)
})

// MustStart returns the interpreter named by $DAMACY_PYTHON, started once
// per process. When it is unset or cannot be embedded, the test is
// skipped with the reason, or fails if $DAMACY_REQUIRE_PYTHON is 1. An
// interpreter whose libpython is not installed (ErrNoLibpython) only ever
// skips: embedding needs the shared library, the other Python tests do
// not.
func MustStart(t testing.TB) *Interpreter {
	t.Helper()
	in, err := shared()
	if err == nil {
		return in
	}
	if os.Getenv(requireEnv) == "1" && !errors.Is(err, ErrNoLibpython) {
		t.Fatalf("%v (%s=1)", err, requireEnv)
	}
	t.Skip(err)
	return nil
}

// MustImport imports module in the interpreter, or skips the test saying
// why it could not. ciModule marks a module that the CI requirements
// install: under $DAMACY_REQUIRE_PYTHON=1 its absence fails the test.
func MustImport(t testing.TB, in *Interpreter, module string, ciModule bool) {
	t.Helper()
	if err := in.Exec("import " + module); err != nil {
		if ciModule && os.Getenv(requireEnv) == "1" {
			t.Fatalf("import %s: %v", module, err)
		}
		t.Skipf("pyembed: import %s failed: %v", module, err)
	}
}
