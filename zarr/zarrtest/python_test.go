package zarrtest

import (
	"strings"
	"testing"
)

func TestPythonUnset(t *testing.T) {
	t.Setenv(PythonEnv, "")
	// A module list no other test uses, so the probe runs under this env.
	if _, err := Python("zarrtest_unset_probe"); err == nil || !strings.Contains(err.Error(), PythonEnv) {
		t.Fatalf("Python() without %s = %v, want an error naming it", PythonEnv, err)
	}
}

func TestPythonMissingModule(t *testing.T) {
	t.Setenv(PythonEnv, "sh") // runs, but `sh -c "import x"` fails
	if _, err := Python("zarrtest_no_such_module"); err == nil || !strings.Contains(err.Error(), "zarrtest_no_such_module") {
		t.Fatalf("Python() with a missing module = %v, want an error naming it", err)
	}
}
