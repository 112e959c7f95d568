//go:build !linux

package bench

import "errors"

// processRSS is known on Linux only.
func processRSS() (own, files int64, err error) {
	return 0, 0, errors.New("resident memory is read from /proc on Linux only")
}
