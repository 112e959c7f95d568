//go:build !purego

package cpu

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"
)

// cpuinfo returns the value of the first line of /proc/cpuinfo named
// field, and skips the test where there is no such file (not Linux).
func cpuinfo(t *testing.T, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(name) == field {
			return strings.TrimSpace(value)
		}
	}
	t.Skipf("/proc/cpuinfo has no %q line", field)
	return ""
}

// HasAVX2 agrees with the kernel, which lists avx2 among a CPU's flags
// only when the CPU has it and the kernel saves the YMM registers.
func TestHasAVX2(t *testing.T) {
	want := slices.Contains(strings.Fields(cpuinfo(t, "flags")), "avx2")
	if got := HasAVX2(); got != want {
		t.Errorf("HasAVX2() = %v; want %v (the avx2 flag in /proc/cpuinfo)", got, want)
	}
}

// CPUID leaf 0 spells the vendor in EBX, EDX, ECX, as the kernel prints it.
func TestCPUIDVendor(t *testing.T) {
	_, ebx, ecx, edx := cpuid(0, 0)
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:], ebx)
	binary.LittleEndian.PutUint32(b[4:], edx)
	binary.LittleEndian.PutUint32(b[8:], ecx)
	got := string(bytes.TrimRight(b[:], "\x00"))
	if want := cpuinfo(t, "vendor_id"); got != want {
		t.Errorf("cpuid(0, 0) vendor = %q; want %q (vendor_id in /proc/cpuinfo)", got, want)
	}
}

// XGETBV runs wherever HasAVX2 is true, and then reports the XMM and YMM
// state enabled.
func TestXGETBV(t *testing.T) {
	if !HasAVX2() {
		t.Skip("no AVX2")
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 {
		t.Errorf("xgetbv() = %#x with AVX2; want bits 1 and 2 set", xcr0)
	}
}
