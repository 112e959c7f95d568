//go:build !linux

package serve

import (
	"errors"
	"os"
)

// openPidfd fails outside Linux: the parent is watched by polling.
func openPidfd(int) (*os.File, error) { return nil, errors.ErrUnsupported }

// waitPidfd is never reached outside Linux.
func waitPidfd(*os.File) bool { return false }
