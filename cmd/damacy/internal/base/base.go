// Package base holds what the damacy command's subcommands and its
// benchmark harness (package bench) share: the formatting of numbers and
// shapes in their output, and the engine names of their flags.
package base

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatBytes writes n with a decimal unit (GB = 1e9 B, as throughputs are
// quoted).
func FormatBytes(n int64) string {
	f := float64(n)
	switch {
	case n >= 1e12:
		return fmt.Sprintf("%.2f TB", f/1e12)
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", f/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// Shape writes a shape (or any list of integers) as "[a, b, c]".
func Shape(s []int64) string {
	p := make([]string, len(s))
	for i, v := range s {
		p[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(p, ", ") + "]"
}

// Ratio is a / b, or 0 when b is 0.
func Ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// EngineDevice maps an engine name (auto, host, cuda or cuda:N; cpu and gpu
// are accepted too) to pipeline.Config.Device.
func EngineDevice(engine string) (string, error) {
	switch engine {
	case "", "auto":
		return "", nil
	case "host", "cpu":
		return "cpu", nil
	case "cuda", "gpu":
		return "cuda", nil
	}
	if rest, ok := strings.CutPrefix(engine, "cuda:"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
			return engine, nil
		}
	}
	return "", fmt.Errorf("%q: want auto, host, cuda or cuda:N", engine)
}
