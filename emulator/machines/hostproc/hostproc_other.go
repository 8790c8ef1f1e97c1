//go:build !unix

package hostproc

import (
	"os"
	"syscall"
)

// Attr asks nothing of the system: it has no process groups to signal.
func Attr() *syscall.SysProcAttr { return nil }

// Terminate ends the process: there is no SIGTERM to send.
func Terminate(p *os.Process) { _ = p.Kill() }

// Kill ends the process.
func Kill(p *os.Process) { _ = p.Kill() }
