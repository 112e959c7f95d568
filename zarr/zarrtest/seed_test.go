package zarrtest

import "testing"

func TestSeedFromEnv(t *testing.T) {
	t.Setenv(SeedEnv, "0x2a")
	if got := Seed(t); got != 42 {
		t.Fatalf("Seed with %s=0x2a = %d, want 42", SeedEnv, got)
	}
}

func TestSeedFresh(t *testing.T) {
	t.Setenv(SeedEnv, "")
	if Seed(t) == Seed(t) {
		t.Fatal("two fresh seeds are equal") // 1 in 2^64
	}
}
