package serve

import (
	"os"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
)

// TestMain leaves nothing in /dev/shm once the tests are over
// (cudatest.Main): TestServeCUDA runs a CUDA server in this process, whose
// done events and shared slots' ready events give it a file there.
func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }
