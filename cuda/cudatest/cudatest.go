// Package cudatest helps tests that need a CUDA GPU: they skip, with the
// reason, where there is none.
//
// Set DAMACY_REQUIRE_GPU=1 on a GPU host to turn those skips into
// failures, so that a broken driver setup cannot pass as "skipped"; there a
// missing nvCOMP fails the tests that would otherwise decode on the CPU
// (RequireNVCOMP).
package cudatest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/damacy-go/damacy/cuda"
)

// RequireEnv names the environment variable that, set to 1, makes
// MustHaveGPU fail instead of skip.
const RequireEnv = "DAMACY_REQUIRE_GPU"

// probe loads the driver once and checks that device 0 exists.
var probe = sync.OnceValues(func() (cuda.Device, error) {
	if err := cuda.Init(); err != nil {
		return 0, err
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errors.New("cuda: driver loaded but it reports no devices")
	}
	return cuda.GetDevice(0)
})

// HasGPU reports whether the driver loads and device 0 exists; the error
// says why not.
func HasGPU() error {
	_, err := probe()
	return err
}

// MustHaveGPU returns device 0, or skips the test with the probe's error
// (fails it when DAMACY_REQUIRE_GPU=1).
func MustHaveGPU(t testing.TB) cuda.Device {
	t.Helper()
	dev, err := probe()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("no usable CUDA GPU, and %s=1: %v", RequireEnv, err)
		}
		t.Skipf("no usable CUDA GPU: %v", err)
	}
	return dev
}

// RequireNVCOMP is for GPU tests that decode with nvCOMP when it loads and
// would pass on the CPU decoders alone: err is why nvCOMP did not load
// (nil: it did). With DAMACY_REQUIRE_GPU=1, as on the GPU host, a missing
// nvCOMP fails the test, so that a GPU run cannot pass without nvCOMP
// having decoded anything; elsewhere the reason is logged and the test
// goes on.
func RequireNVCOMP(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("nvCOMP did not load, and %s=1: %v", RequireEnv, err)
		return
	}
	t.Logf("nvCOMP did not load; decoding on the CPU: %v", err)
}

// shared is the process's shared executor for device 0, started on
// first use and closed only by Main, after the tests: closing it earlier
// would release the primary context and with it every module and
// allocation a later test expects.
var shared struct {
	once sync.Once
	ex   *cuda.Executor
	err  error
}

func executor() (*cuda.Executor, error) {
	shared.once.Do(func() {
		dev, err := probe()
		if err != nil {
			shared.err = err
			return
		}
		shared.ex, shared.err = cuda.NewExecutor(dev)
	})
	return shared.ex, shared.err
}

// Executor returns the test binary's shared executor for device 0, or
// skips like MustHaveGPU. It lives until the tests are over (Main), so
// tests may keep modules and streams across each other; a test that needs
// to close an executor makes its own with cuda.NewExecutor.
func Executor(t testing.TB) *cuda.Executor {
	t.Helper()
	MustHaveGPU(t)
	e, err := executor()
	if err != nil {
		t.Fatalf("cuda.NewExecutor: %v", err)
	}
	return e
}

// Main runs a test binary's tests (its TestMain: os.Exit(cudatest.Main(m)))
// and then leaves nothing behind in /dev/shm: it closes the shared
// executor, which releases the primary context that the tests' pipelines
// have released already (destroying it removes the file the driver keeps
// for a process that made an interprocess event), and removes the
// process's files that remain, a context some test leaked keeping one.
func Main(m *testing.M) int {
	code := m.Run()
	shared.once.Do(func() {}) // no executor is made after this
	if shared.ex != nil {
		shared.ex.Close()
	}
	if err := cuda.RemoveIPCFiles(os.Getpid()); err != nil {
		fmt.Fprintf(os.Stderr, "cudatest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
