package hostproc

import "syscall"

// Attr puts the process in its own process group, and has the kernel kill
// it when the emulator dies, even by SIGKILL.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
