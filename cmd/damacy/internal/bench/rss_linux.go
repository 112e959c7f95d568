package bench

import (
	"fmt"
	"os"
)

// processRSS returns the process's resident memory, from /proc/self/statm.
func processRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0, fmt.Errorf("/proc/self/statm: %w", err)
	}
	return resident * int64(os.Getpagesize()), nil
}
