package cuda

import (
	"strings"
	"testing"
)

func TestUUIDString(t *testing.T) {
	u := UUID{0x8c, 0x1e, 0x02, 0x4f, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18, 0x29, 0x3a, 0x4b, 0x5c}
	const want = "GPU-8c1e024f-a1b2-c3d4-e5f6-0718293a4b5c"
	if got := u.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	for _, s := range []string{want, strings.ToUpper(want), want[4:], "MIG-" + want[4:]} {
		got, err := ParseUUID(s)
		if err != nil || got != u {
			t.Errorf("ParseUUID(%q) = %v, %v; want %v", s, got, err, u)
		}
	}
}

func TestParseUUIDErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"GPU-",
		"GPU-8c1e024f-a1b2-c3d4-e5f6-0718293a4b5",   // short last group
		"GPU-8c1e024f-a1b2-c3d4-e5f6-0718293a4b5cd", // long last group
		"GPU-8c1e024fa1b2-c3d4-e5f6-0718293a4b5c",   // four groups
		"GPU-8c1e024f-a1b2-c3d4-e5f6-0718293a4bzz",  // not hex
		"0",
	} {
		if u, err := ParseUUID(s); err == nil {
			t.Errorf("ParseUUID(%q) = %v, want an error", s, u)
		}
	}
}
