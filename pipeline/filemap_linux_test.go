package pipeline

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimit reads memory limits from a made-up cgroup file
// system: v2's lowest memory.max over the group and those above it
// ("max" is none), v1's memory.limit_in_bytes, and none without a file.
func TestCgroupMemoryLimit(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fs/memory.max", "max\n")
	write("fs/job/memory.max", "8589934592\n")
	write("fs/job/step/memory.max", "max\n")
	write("fs/memory/slurm/memory.limit_in_bytes", "4294967296\n")
	write("fs/memory/memory.limit_in_bytes", "9223372036854771712\n")
	write("v2", "0::/job/step\n")
	write("v2-root", "0::/\n")
	write("v1", "12:pids:/slurm\n11:memory:/slurm\n")
	write("v1-cpu", "4:cpu,cpuacct:/x\n")
	for _, c := range []struct {
		proc string
		want int64
	}{{"v2", 8 << 30}, {"v2-root", 0}, {"v1", 4 << 30}, {"v1-cpu", 0}, {"absent", 0}} {
		if got := cgroupMemoryLimit(filepath.Join(root, c.proc), filepath.Join(root, "fs")); got != c.want {
			t.Errorf("%s: %d, want %d", c.proc, got, c.want)
		}
	}
	if lim := memoryLimit(); lim <= 0 {
		t.Errorf("memoryLimit() = %d on Linux", lim)
	}
}
