//go:build !linux

package pipeline

import (
	"errors"
	"os"
)

// mapFile is Linux-only: elsewhere files are always read into staging.
func mapFile(*os.File, int64) ([]byte, error) {
	return nil, errors.New("mapping files is supported on Linux only")
}

func unmapFile([]byte) {}

// memoryLimit is unknown here: no file is mapped and no chunk cached by
// default.
func memoryLimit() int64 { return 0 }
