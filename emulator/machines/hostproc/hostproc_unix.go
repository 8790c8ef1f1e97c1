//go:build unix

package hostproc

import (
	"os"
	"syscall"
)

// Terminate sends SIGTERM to the process's group.
func Terminate(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }

// Kill sends SIGKILL to the process's group.
func Kill(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
