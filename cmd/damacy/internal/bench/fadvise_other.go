//go:build !linux || !(amd64 || arm64)

package bench

import (
	"errors"
	"runtime"
)

// dropFileCache is implemented on 64-bit Linux (amd64, arm64) only.
func dropFileCache(path string) error {
	return errors.New("--drop-cache is implemented on linux/amd64 and linux/arm64 only, not " + runtime.GOOS + "/" + runtime.GOARCH)
}
