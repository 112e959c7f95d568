package pipeline

import (
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// mapFile maps the first size bytes of f (a whole number of pages)
// read-only and shared: the page cache's pages themselves.
func mapFile(f *os.File, size int64) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmapFile(b []byte) { _ = syscall.Munmap(b) }

// memoryLimit returns the memory this process may use, in bytes: the
// host's RAM, or less where its cgroup caps it (a container's or a batch
// job's limit); 0 when unknown.
func memoryLimit() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	limit := int64(si.Totalram) * int64(si.Unit)
	if c := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup"); c > 0 && c < limit {
		limit = c
	}
	return limit
}

// cgroupMemoryLimit returns the lowest memory limit over the cgroups that
// procCgroup (the format of /proc/self/cgroup) names, under the cgroup
// file system mounted at root: for cgroup v2 the memory.max of the group
// and of every group above it, for v1 the memory controller's
// memory.limit_in_bytes of the group and of the hierarchy's root. 0 when
// there is none.
func cgroupMemoryLimit(procCgroup, root string) int64 {
	data, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0
	}
	var lowest int64
	note := func(file string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && n > 0 && (lowest == 0 || n < lowest) {
			lowest = n // "max" (v2's no limit) does not parse
		}
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "": // v2
			for dir := path.Clean(f[2]); ; dir = path.Dir(dir) {
				note(path.Join(root, dir, "memory.max"))
				if dir == "/" {
					break
				}
			}
		case strings.Contains(","+f[1]+",", ",memory,"): // v1
			note(path.Join(root, "memory", path.Clean(f[2]), "memory.limit_in_bytes"))
			note(path.Join(root, "memory", "memory.limit_in_bytes"))
		}
	}
	return lowest
}
