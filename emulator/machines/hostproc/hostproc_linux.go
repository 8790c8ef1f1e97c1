package hostproc

import (
	"os"
	"syscall"
)

// Attr puts the process in its own process group, and has the kernel kill
// it when the emulator dies, even by SIGKILL.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Terminate sends SIGTERM to the process's group.
func Terminate(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }

// Kill sends SIGKILL to the process's group.
func Kill(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
