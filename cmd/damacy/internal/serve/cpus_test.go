package serve

import (
	"runtime"
	"testing"
)

// TestShareCPUs checks the loader's share of the host under a launcher
// that sets LOCAL_WORLD_SIZE, and that GOMAXPROCS, when set, wins.
func TestShareCPUs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(64))
	for _, tc := range []struct {
		env  map[string]string
		cpus int
		want int
	}{
		{map[string]string{}, 64, 64},
		{map[string]string{"LOCAL_WORLD_SIZE": "1"}, 64, 64},
		{map[string]string{"LOCAL_WORLD_SIZE": "4"}, 64, 16},
		{map[string]string{"LOCAL_WORLD_SIZE": "8"}, 16, 4},
		{map[string]string{"LOCAL_WORLD_SIZE": "x"}, 64, 64},
		{map[string]string{"LOCAL_WORLD_SIZE": "4", "GOMAXPROCS": "64"}, 64, 64},
	} {
		runtime.GOMAXPROCS(64)
		shareCPUs(func(k string) string { return tc.env[k] }, tc.cpus)
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("%v on %d CPUs: GOMAXPROCS %d, want %d", tc.env, tc.cpus, got, tc.want)
		}
	}
}
