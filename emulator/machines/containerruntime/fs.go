package containerruntime

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// A View is the filesystem a container's process sees: its image's files,
// its volume mounts and, for a Windows HostProcess container, the host's
// own disk. Paths are in the container's OS notation.
type View struct {
	windows bool
	// host is the node's disk, seen whole by a HostProcess container
	// and, for any container, behind its hostPath mounts.
	host vmdisk.Disk
	// hostVisible: paths outside every mount and the image resolve on
	// the host (HostProcess); otherwise they are the container's own
	// writable layer.
	hostVisible bool
	// image is where the image's root is seen ("/" on Linux, the sandbox
	// mount point for a HostProcess container) and its files.
	imageRoot string
	image     map[string]bool
	mounts    []mountPoint
	// layer is what the process wrote outside every mount: gone with the
	// container, never on the host.
	layer map[string][]byte
	// names are the layer's files and dirs the directories made in it,
	// by key, as the process spelled them.
	names, dirs map[string]string
}

type mountPoint struct {
	at string // normalised target
	// hostDir, when set, is the node's directory behind the mount
	// (hostPath volumes); files otherwise (ConfigMap, Secret, token).
	hostDir  string
	files    map[string][]byte
	readOnly bool
}

// windowsSystemFiles are what every Windows Server host has on C:, which
// the node's disk folder does not hold.
var windowsSystemFiles = []string{
	`C:\Windows\System32\cmd.exe`,
	`C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe`,
	`C:\Windows\System32\netsh.exe`,
	`C:\Windows\System32\wbem\WMIC.exe`,
}

// norm makes a path absolute and canonical in the view's notation:
// C:\a\b (compared without regard to case) on Windows, /a/b on Linux.
func (v *View) norm(p, cwd string) string {
	if !v.windows {
		if !strings.HasPrefix(p, "/") {
			p = cwd + "/" + p
		}
		return path.Clean(p)
	}
	s := strings.ReplaceAll(p, "/", `\`)
	switch {
	case len(s) >= 2 && s[1] == ':':
		s = s[2:]
	case strings.HasPrefix(s, `\`):
	default:
		s = strings.TrimPrefix(v.norm(cwd, `C:\`), "C:") + `\` + s
	}
	c := path.Clean("/" + strings.ReplaceAll(s, `\`, "/"))
	return "C:" + strings.ReplaceAll(c, "/", `\`)
}

func (v *View) key(p string) string {
	if v.windows {
		return strings.ToLower(p)
	}
	return p
}

// under reports whether p is at or below dir (both normalised), and the
// rest of p below dir with forward slashes.
func (v *View) under(p, dir string) (string, bool) {
	kp, kd := v.key(p), strings.TrimRight(v.key(dir), `\/`)
	if kp == kd {
		return "", true
	}
	sep := "/"
	if v.windows {
		sep = `\`
	}
	if strings.HasPrefix(kp, kd+sep) {
		return strings.ReplaceAll(p[len(kd)+1:], `\`, "/"), true
	}
	return "", false
}

// mountFor is the innermost mount holding p.
func (v *View) mountFor(p string) (*mountPoint, string) {
	var best *mountPoint
	rest := ""
	for i := range v.mounts {
		if r, ok := v.under(p, v.mounts[i].at); ok && (best == nil || len(v.mounts[i].at) > len(best.at)) {
			best, rest = &v.mounts[i], r
		}
	}
	return best, rest
}

// Exists says whether a file or directory exists at p.
func (v *View) Exists(p, cwd string) bool {
	p = v.norm(p, cwd)
	if m, rest := v.mountFor(p); m != nil {
		if m.hostDir != "" {
			_, err := v.hostStat(m.hostDir, rest)
			return err == nil
		}
		if rest == "" {
			return true
		}
		for f := range m.files {
			if f == rest || strings.HasPrefix(f, rest+"/") {
				return true
			}
		}
		return false
	}
	if rest, ok := v.under(p, v.imageRoot); ok {
		if rest == "" {
			return true
		}
		for f := range v.image {
			if v.key(f) == v.key(rest) || strings.HasPrefix(v.key(f), v.key(rest)+"/") {
				return true
			}
		}
		if !v.hostVisible {
			return v.inLayer(p) || v.inDirs(p) || v.holdsMount(p)
		}
	}
	if v.inLayer(p) || v.inDirs(p) || v.holdsMount(p) {
		return true
	}
	if !v.hostVisible {
		return false
	}
	for _, f := range windowsSystemFiles {
		if _, ok := v.under(f, p); ok {
			return true
		}
	}
	hp, err := v.host.HostPath(p)
	if err != nil {
		return false
	}
	_, err = os.Stat(hp)
	return err == nil
}

func (v *View) inLayer(p string) bool {
	for f := range v.layer {
		if _, ok := v.under(f, p); ok {
			return true
		}
	}
	return false
}

// holdsMount says whether a mount point is below p: the runtime creates
// a mount point's directories in the container.
func (v *View) holdsMount(p string) bool {
	for _, m := range v.mounts {
		if _, ok := v.under(m.at, p); ok {
			return true
		}
	}
	return false
}

func (v *View) inDirs(p string) bool {
	_, ok := v.dirs[v.key(p)]
	return ok
}

func (v *View) hostStat(dir, rest string) (fs.FileInfo, error) {
	p := dir
	if rest != "" {
		p = strings.TrimRight(dir, `\/`) + v.sep() + strings.ReplaceAll(rest, "/", v.sep())
	}
	hp, err := v.host.HostPath(p)
	if err != nil {
		return nil, err
	}
	return os.Stat(hp)
}

func (v *View) sep() string {
	if v.windows {
		return `\`
	}
	return "/"
}

// ReadFile reads p; fs.ErrNotExist when there is no such file.
func (v *View) ReadFile(p, cwd string) ([]byte, error) {
	p = v.norm(p, cwd)
	if data, ok := v.layer[v.key(p)]; ok {
		return data, nil
	}
	if m, rest := v.mountFor(p); m != nil {
		if m.hostDir != "" {
			return v.readHost(strings.TrimRight(m.hostDir, `\/`) + v.sep() + strings.ReplaceAll(rest, "/", v.sep()))
		}
		if data, ok := m.files[rest]; ok {
			return data, nil
		}
		return nil, fs.ErrNotExist
	}
	if rest, ok := v.under(p, v.imageRoot); ok {
		for f := range v.image {
			if v.key(f) == v.key(rest) {
				// The image's programs are not carried: their
				// presence is what matters.
				return []byte{}, nil
			}
		}
		if !v.hostVisible {
			return nil, fs.ErrNotExist
		}
	}
	if !v.hostVisible {
		return nil, fs.ErrNotExist
	}
	return v.readHost(p)
}

func (v *View) readHost(p string) ([]byte, error) {
	hp, err := v.host.HostPath(p)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(hp)
}

// WriteFile writes p where the process's write lands: the node's disk
// behind a hostPath mount or, for a HostProcess container, anywhere on
// the host; the container's own layer otherwise. onHost says which.
func (v *View) WriteFile(p, cwd string, data []byte) (onHost bool, err error) {
	p = v.norm(p, cwd)
	if m, rest := v.mountFor(p); m != nil {
		if m.readOnly || (m.hostDir == "" && !v.windows) {
			return false, &fs.PathError{Op: "open", Path: p, Err: errors.New("read-only file system")}
		}
		if m.hostDir == "" {
			// A Windows volume is a directory of the kubelet's that
			// a HostProcess container may write; nothing else reads
			// what it writes there.
			v.writeLayer(p, data)
			return false, nil
		}
		return true, v.writeHost(strings.TrimRight(m.hostDir, `\/`)+v.sep()+strings.ReplaceAll(rest, "/", v.sep()), data)
	}
	if _, inImage := v.under(p, v.imageRoot); inImage || !v.hostVisible {
		v.writeLayer(p, data)
		return false, nil
	}
	return true, v.writeHost(p, data)
}

func (v *View) writeLayer(p string, data []byte) {
	if v.layer == nil {
		v.layer = map[string][]byte{}
	}
	v.layer[v.key(p)] = data
	if v.names == nil {
		v.names = map[string]string{}
	}
	v.names[v.key(p)] = p
}

func (v *View) writeHost(p string, data []byte) error {
	hp, err := v.host.HostPath(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return err
	}
	return os.WriteFile(hp, data, 0o644)
}
