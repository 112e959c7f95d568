package zarrtest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// SeedEnv names the environment variable that replays a randomized test:
// set to a seed a failed run logged, every Seed call returns it.
const SeedEnv = "DAMACY_SEED"

// Seed returns the seed of a randomized test: $DAMACY_SEED when set, else
// a fresh random one. It logs the seed with the way to replay it, so a
// failure can be run again with the same data. A malformed DAMACY_SEED
// fails the test.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv(SeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q: not an unsigned integer", SeedEnv, s)
		}
		t.Logf("seed %d (from %s)", seed, SeedEnv)
		return seed
	}
	seed := rand.Uint64()
	t.Logf("seed %d (replay: %s=%d)", seed, SeedEnv, seed)
	return seed
}
