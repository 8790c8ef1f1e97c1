// Package vmdisk is an emulated machine's disk: a folder on the host that
// the machine's OS addresses with its own paths (/var/log/... on Linux,
// C:\var\log\... on Windows), and the log files the machine's services
// write there, in the places a log collector looks for them on Azure.
package vmdisk

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Disk is a machine's filesystem.
type Disk struct {
	// Root is the host folder that stands for / (Linux) or C:\ (Windows).
	Root    string
	Windows bool
	// User is the login user, whose home is the working directory.
	User string
}

// The accounts the VM agent runs as: LocalSystem on Windows, root on
// Linux. Their homes are not under C:\Users or /home.
const (
	SystemUser = "SYSTEM"
	RootUser   = "root"
)

// Home is the user's home folder in the machine's own notation.
func (d Disk) Home() string {
	switch {
	case d.Windows && d.User == SystemUser:
		return `C:\Windows\system32\config\systemprofile`
	case d.Windows:
		return `C:\Users\` + d.User
	case d.User == RootUser:
		return "/root"
	}
	return "/home/" + d.User
}

// HostPath maps a path of the machine's OS to the host. Paths are
// resolved against the home folder and cleaned, so nothing outside Root is
// reachable; on Windows the drive is C: and names match without regard to
// case, as NTFS does.
func (d Disk) HostPath(p string) (string, error) {
	clean, err := d.Clean(p)
	if err != nil {
		return "", err
	}
	if !d.Windows {
		return filepath.Join(d.Root, filepath.FromSlash(clean)), nil
	}
	// C:\a\b -> Root/a/b, matching each name case-insensitively.
	host := d.Root
	for _, part := range strings.Split(strings.TrimPrefix(clean[2:], `\`), `\`) {
		if part == "" {
			continue
		}
		host = filepath.Join(host, matchName(host, part))
	}
	return host, nil
}

// Clean resolves p against the home folder: an absolute path of the OS.
func (d Disk) Clean(p string) (string, error) {
	p = strings.TrimSpace(p)
	if !d.Windows {
		if p == "~" || strings.HasPrefix(p, "~/") {
			p = d.Home() + p[1:]
		}
		if !strings.HasPrefix(p, "/") {
			p = d.Home() + "/" + p
		}
		return path.Clean(p), nil
	}
	s := strings.ReplaceAll(p, "/", `\`)
	switch {
	case len(s) >= 2 && s[1] == ':':
		if !strings.EqualFold(s[:1], "c") {
			return "", fmt.Errorf("drive %s does not exist: the machine has only C:", strings.ToUpper(s[:2]))
		}
		s = s[2:]
	case strings.HasPrefix(s, `\`):
	default:
		s = d.Home()[2:] + `\` + s
	}
	cleaned := path.Clean("/" + strings.ReplaceAll(s, `\`, "/"))
	return `C:` + strings.ReplaceAll(cleaned, "/", `\`), nil
}

func matchName(dir, name string) string {
	if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
		return name
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.EqualFold(e.Name(), name) {
			return e.Name()
		}
	}
	return name
}

// Services whose logs the machine keeps.
const (
	Boot       = "boot" // cloud-init (Linux) or cloudbase-init (Windows)
	Kubelet    = "kubelet"
	Containerd = "containerd"
	CNI        = "cni"
	SSHD       = "sshd"
)

// Journal is where the emulated Linux journal keeps a unit's lines;
// journalctl -u UNIT reads them.
func Journal(unit string) string {
	return "/var/log/journal/" + strings.TrimSuffix(unit, ".service") + ".service.log"
}

// LogPath is where a service's log is on the machine's OS, where CAPZ's
// log collection reads it (on Linux the journal's units).
func LogPath(windows bool, service string) string {
	if windows {
		switch service {
		case Boot:
			return `C:\Program Files\Cloudbase Solutions\Cloudbase-Init\log\cloudbase-init.log`
		case Kubelet:
			return `C:\var\log\kubelet\kubelet.log`
		case Containerd:
			return `C:\var\log\containerd\containerd.log`
		case CNI:
			return `C:\cni.log`
		case SSHD:
			return `C:\ProgramData\ssh\logs\sshd.log`
		}
		return `C:\var\log\` + service + ".log"
	}
	switch service {
	case Boot:
		return "/var/log/cloud-init-output.log"
	case Kubelet, Containerd:
		return Journal(service)
	case CNI:
		return "/var/log/calico/cni/cni.log"
	case SSHD:
		return "/var/log/auth.log"
	}
	return "/var/log/" + service + ".log"
}

// Logs appends timestamped lines to the machine's service logs.
type Logs struct {
	disk Disk
	now  func() time.Time
	mu   sync.Mutex
}

// NewLogs writes the logs of the machine whose disk is d.
func NewLogs(d Disk) *Logs { return &Logs{disk: d, now: time.Now} }

// Write appends one line to a service's log. A log that cannot be written
// loses the line: logging never stops the machine.
func (l *Logs) Write(service, format string, args ...any) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := l.disk.HostPath(LogPath(l.disk.Windows, service))
	if err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	fmt.Fprintf(f, "%s %s\n", l.now().UTC().Format(time.RFC3339Nano), msg)
}
