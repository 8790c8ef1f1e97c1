//go:build !unix

package localworld

import (
	"errors"
	"os"
	"syscall"
)

// deleteSignal is no signal here: a local world runs on Linux only, and
// nothing sends it.
const deleteSignal = syscall.Signal(-1)

// tryLock cannot lock here, so no world starts.
func tryLock(*os.File) error { return errors.New("a local world runs on Linux only") }

func unlock(*os.File) {}
