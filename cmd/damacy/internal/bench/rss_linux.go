package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// processRSS returns the process's resident memory, from /proc/self/status:
// own is its anonymous and shared-memory pages (the heap, the pinned
// staging, memfd batch slots), files the pages of files it has mapped (the
// page cache the CUDA engine maps, Config.MappedFileBytes), which the
// kernel counts as resident too.
func processRSS() (own, files int64, err error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	var anon, file, shmem int64 = -1, -1, -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "RssAnon":
			dst = &anon
		case "RssFile":
			dst = &file
		case "RssShmem":
			dst = &shmem
		default:
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, 0, fmt.Errorf("/proc/self/status: %s: %q", name, rest)
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/status: %s: %w", name, err)
		}
		*dst = kb << 10
	}
	if anon < 0 || file < 0 || shmem < 0 {
		return 0, 0, fmt.Errorf("/proc/self/status: no RssAnon, RssFile and RssShmem")
	}
	return anon + shmem, file, nil
}
