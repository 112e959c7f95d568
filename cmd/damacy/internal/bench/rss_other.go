//go:build !linux

package bench

import "errors"

// processRSS is known on Linux only.
func processRSS() (int64, error) {
	return 0, errors.New("resident memory is read from /proc on Linux only")
}
