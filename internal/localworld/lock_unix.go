//go:build unix

package localworld

import (
	"os"
	"syscall"
)

// deleteSignal is down's request to the up that holds a world: delete the
// cluster, then stop.
const deleteSignal = syscall.SIGUSR1

// tryLock takes f's exclusive lock, or fails at once if a process holds
// it; the lock goes with the process, however it ends.
func tryLock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
