// Package zarrtest holds test support that tests across the module share.
// It imports no package of the module, so every package's tests may use it.
//
// The cross-checks against the Python zarr ecosystem (zarr-python,
// numcodecs, tensorstore) share one policy: the interpreter is
// $DAMACY_PYTHON; without it, or when it lacks a module, a test skips,
// unless DAMACY_REQUIRE_PYTHON=1 (as CI sets), when it fails.
//
// Randomized tests take their seed from Seed, which logs it and replays a
// logged seed given as $DAMACY_SEED.
package zarrtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Environment variables of the policy.
const (
	PythonEnv        = "DAMACY_PYTHON"
	RequirePythonEnv = "DAMACY_REQUIRE_PYTHON"
)

// probes caches one probe per module list for the test binary's life.
var probes sync.Map // string -> func() (string, error)

// Python returns the interpreter if it runs and imports every module.
func Python(modules ...string) (string, error) {
	key := strings.Join(modules, ", ")
	probe, _ := probes.LoadOrStore(key, sync.OnceValues(func() (string, error) {
		py := os.Getenv(PythonEnv)
		if py == "" {
			return "", errors.New(PythonEnv + " is not set")
		}
		if len(modules) == 0 {
			return py, nil
		}
		out, err := exec.Command(py, "-c", "import "+key).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s cannot import %s: %v: %s", py, key, err, strings.TrimSpace(string(out)))
		}
		return py, nil
	}))
	return probe.(func() (string, error))()
}

// MustHavePython returns the interpreter if it imports every module, and
// otherwise skips the test with the reason, or fails it when
// DAMACY_REQUIRE_PYTHON=1.
func MustHavePython(t testing.TB, modules ...string) string {
	t.Helper()
	py, err := Python(modules...)
	if err != nil {
		if os.Getenv(RequirePythonEnv) == "1" {
			t.Fatalf("python cross-check required (%s=1): %v", RequirePythonEnv, err)
		}
		t.Skipf("skipping python cross-check: %v", err)
	}
	return py
}
