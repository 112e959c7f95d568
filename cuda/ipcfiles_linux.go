package cuda

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ipcFileDir is where the driver keeps the files of interprocess events.
const ipcFileDir = "/dev/shm"

// ipcFilePrefix is how the names of the driver's files for interprocess
// events of process pid, user uid, begin: "cuda.shm.<uid>.<pid>." with uid
// in decimal and pid in lowercase hexadecimal without padding, followed
// by a counter (cuda.shm.1000.1a2b.1). The driver makes one such file (80
// KiB) at a process's first EventInterprocess event and removes it only
// when that context is destroyed.
func ipcFilePrefix(uid, pid int) string {
	return "cuda.shm." + strconv.Itoa(uid) + "." + strconv.FormatUint(uint64(pid), 16) + "."
}

// RemoveIPCFiles removes the files the driver made in /dev/shm for the
// interprocess events of process pid of this user. A process calls it for
// itself as it exits (after destroying its contexts where it can: a
// context still alive may need its file), or for a peer that died by a
// signal and so destroyed nothing. Missing files and a missing /dev/shm
// are not errors. Elsewhere than on Linux it does nothing.
func RemoveIPCFiles(pid int) error {
	return removeIPCFiles(ipcFileDir, os.Getuid(), pid)
}

// removeIPCFiles removes the files of process pid, user uid, in dir.
func removeIPCFiles(dir string, uid, pid int) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	prefix := ipcFilePrefix(uid, pid)
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
