//go:build !linux

package localworld

import (
	"fmt"
	"os"
	"syscall"
)

// lockHolder cannot tell the lock's holder where there is no /proc/locks.
func lockHolder(*os.File) (int, error) { return 0, nil }

// signalHolder signals no one where the lock's holder cannot be told: a
// recorded pid may be any process's by now.
func signalHolder(dir string, _ syscall.Signal) (int, error) {
	if _, held, err := Holder(dir); err != nil || !held {
		return 0, err
	}
	return 0, fmt.Errorf("state directory %s is in use: stop its winkube up (Ctrl-C) and run down again", dir)
}

// checkPrivate checks nothing where the file system's owner and mode bits
// are not Unix's.
func checkPrivate(string) error { return nil }
