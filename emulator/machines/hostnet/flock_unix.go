//go:build unix

package hostnet

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on f, or fails at once if another
// process holds it; the lock goes with the process.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
