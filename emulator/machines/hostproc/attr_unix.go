//go:build unix && !linux

package hostproc

import "syscall"

// Attr puts the process in its own process group; without a parent-death
// signal, a process outlives an emulator killed by SIGKILL.
func Attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
