package pipeline

import (
	"os"
	"testing"

	"github.com/damacy-go/damacy/cuda/cudatest"
)

// TestMain leaves nothing in /dev/shm once the tests are over (cudatest.Main).
func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }
