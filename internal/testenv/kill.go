package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killAPIServer ends at once the kube-apiserver this process started with
// certDir, and waits until envtest's reaper has collected it.
//
// A test's control plane keeps nothing worth a graceful shutdown: etcd's
// data directory is removed right after. On SIGTERM kube-apiserver v1.36
// still spends about a second stopping its controllers (the ServiceCIDR
// allocator's worker waits out its one-second loop), and every package
// with an API server pays that second again at its end, some 25 times in
// `go test -short ./...`. envtest offers no kill and keeps the process to
// itself, so it is found here among this process's children by the
// --cert-dir envtest gave it; envtest's own Stop then finds it exited.
// It reports whether it killed one.
func killAPIServer(certDir string) bool {
	if certDir == "" {
		return false
	}
	pid := childWithArg("kube-apiserver", "--cert-dir="+certDir)
	if pid == 0 {
		return false
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return false
	}
	// envtest's goroutine waits on the process; until it has, the process
	// is a zombie whose /proc entry stays.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); os.IsNotExist(err) {
			// The reaper marks the process exited just after it has
			// collected it.
			time.Sleep(10 * time.Millisecond)
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// childWithArg is the pid of a child of this process whose program is
// named name and whose arguments include arg, or 0. It reads /proc: on
// another system there is none, and the caller stops the process the slow
// way.
func childWithArg(name, arg string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || parentOf(stat) != self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
		if filepath.Base(args[0]) != name {
			continue
		}
		for _, a := range args[1:] {
			if a == arg {
				return pid
			}
		}
	}
	return 0
}

// parentOf reads the parent pid from a /proc/<pid>/stat line: the fourth
// field, counted after the command name's closing parenthesis, since the
// name itself may hold spaces and parentheses (proc(5)).
func parentOf(stat []byte) int {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
