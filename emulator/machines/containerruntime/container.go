package containerruntime

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// ContainerView is the filesystem of a container that is not a HostProcess
// one: a Linux container's or a process-isolated Windows container's own
// root (its image's files and a writable layer that lives as long as the
// container) with its volumes mounted at their mountPath. Nothing of the
// node is seen but what a hostPath or emptyDir volume puts there.
//
// A Windows mount path is taken as containerd takes it: filepath.Clean
// (which on Windows turns "/" into "\") and a leading "\" gets the C:
// drive, so "C:\etc\foo", "C:/etc/foo" and "/etc/foo" are one directory
// (internal/cri/opts/spec_windows_opts.go, containerd 301026e5).
func ContainerView(node Node, imageFiles []string, mounts []Mount) *View {
	windows := node.OS == "windows"
	root := "/"
	if windows {
		root = `C:\`
	}
	v := &View{windows: windows, host: node.Disk, imageRoot: root, image: map[string]bool{}}
	for _, f := range imageFiles {
		v.image[strings.TrimPrefix(strings.ReplaceAll(f, `\`, "/"), "/")] = true
	}
	for _, m := range mounts {
		mp := mountPoint{at: v.norm(m.At, root), files: m.Files, readOnly: m.ReadOnly}
		if m.HostDir != "" {
			mp.hostDir = v.norm(m.HostDir, root)
		}
		v.mounts = append(v.mounts, mp)
	}
	return v
}

// Windows says whether the view's paths are Windows paths.
func (v *View) Windows() bool { return v.windows }

// Norm is p made absolute against cwd, in the view's notation.
func (v *View) Norm(p, cwd string) string { return v.norm(p, cwd) }

// Entry is a name in a directory of a view.
type Entry struct {
	Name string
	Dir  bool
	Size int64
}

// IsDir says whether p is a directory: the holder of p (a mount, the
// writable layer, the image, the host) says whether it is a file there.
func (v *View) IsDir(p, cwd string) bool {
	p = v.norm(p, cwd)
	if !v.Exists(p, cwd) {
		return false
	}
	if v.inDirs(p) || v.holdsMount(p) {
		return true
	}
	if m, rest := v.mountFor(p); m != nil {
		if m.hostDir != "" {
			fi, err := v.hostStat(m.hostDir, rest)
			return err == nil && fi.IsDir()
		}
		_, file := m.files[rest]
		return !file
	}
	if _, file := v.layer[v.key(p)]; file {
		return false
	}
	if rest, ok := v.under(p, v.imageRoot); ok {
		for f := range v.image {
			if v.key(f) == v.key(rest) {
				return false
			}
		}
		if !v.hostVisible {
			return true
		}
	}
	if !v.hostVisible {
		return true
	}
	for _, f := range windowsSystemFiles {
		if v.key(f) == v.key(p) {
			return false
		}
	}
	if hp, err := v.host.HostPath(p); err == nil {
		if fi, err := os.Stat(hp); err == nil {
			return fi.IsDir()
		}
	}
	// Only what is below p exists: p is their directory.
	return true
}

// Mkdir creates directory p (and its parents) where a write there lands.
func (v *View) Mkdir(p, cwd string) error {
	p = v.norm(p, cwd)
	if m, rest := v.mountFor(p); m != nil {
		if m.readOnly || m.hostDir == "" {
			return &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("read-only file system")}
		}
		hp, err := v.host.HostPath(strings.TrimRight(m.hostDir, `\/`) + v.sep() + strings.ReplaceAll(rest, "/", v.sep()))
		if err != nil {
			return err
		}
		return os.MkdirAll(hp, 0o755)
	}
	if v.hostVisible {
		hp, err := v.host.HostPath(p)
		if err != nil {
			return err
		}
		return os.MkdirAll(hp, 0o755)
	}
	if v.dirs == nil {
		v.dirs = map[string]string{}
	}
	for q := p; ; q = v.parent(q) {
		v.dirs[v.key(q)] = q
		if v.parent(q) == q {
			break
		}
	}
	return nil
}

func (v *View) parent(p string) string {
	if v.windows {
		i := strings.LastIndex(p, `\`)
		if i <= 2 {
			return p[:3]
		}
		return p[:i]
	}
	return path.Dir(p)
}

// AppendFile adds data at the end of p, creating it.
func (v *View) AppendFile(p, cwd string, data []byte) error {
	old, err := v.ReadFile(p, cwd)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_, err = v.WriteFile(p, cwd, append(append([]byte{}, old...), data...))
	return err
}

// List is what directory p holds, by name; fs.ErrNotExist when p is not a
// directory.
func (v *View) List(p, cwd string) ([]Entry, error) {
	p = v.norm(p, cwd)
	if !v.IsDir(p, cwd) {
		return nil, fs.ErrNotExist
	}
	seen := map[string]Entry{}
	add := func(rel string, size int64, dirOnly bool) {
		// rel is a path below p with forward slashes; its first name
		// is what p holds.
		if rel == "" {
			return
		}
		first, more, _ := strings.Cut(rel, "/")
		e := Entry{Name: first, Dir: more != "" || dirOnly}
		if !e.Dir {
			e.Size = size
		}
		seen[v.key(first)] = e
	}
	if m, rest := v.mountFor(p); m != nil {
		if m.hostDir != "" {
			hp, err := v.host.HostPath(strings.TrimRight(m.hostDir, `\/`) + v.sep() + strings.ReplaceAll(rest, "/", v.sep()))
			if err != nil {
				return nil, err
			}
			des, err := os.ReadDir(hp)
			if err != nil {
				return nil, fs.ErrNotExist
			}
			for _, de := range des {
				var size int64
				if fi, err := de.Info(); err == nil {
					size = fi.Size()
				}
				add(de.Name(), size, de.IsDir())
			}
		} else {
			for f, d := range m.files {
				if r, ok := below(f, rest); ok {
					add(r, int64(len(d)), false)
				}
			}
		}
	} else {
		if rest, ok := v.under(p, v.imageRoot); ok {
			for f := range v.image {
				if r, ok := below(v.key(f), v.key(rest)); ok {
					add(f[len(f)-len(r):], 0, false)
				}
			}
		}
		for k, d := range v.layer {
			if r, ok := v.under(v.names[k], p); ok {
				add(r, int64(len(d)), false)
			}
		}
		for k, name := range v.dirs {
			if r, ok := v.under(name, p); ok && k != v.key(p) {
				add(r, 0, true)
			}
		}
	}
	// Mount points below p show as directories of p.
	for _, m := range v.mounts {
		if r, ok := v.under(m.at, p); ok && r != "" {
			add(r, 0, true)
		}
	}
	out := make([]Entry, 0, len(seen))
	for _, e := range seen {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return strings.ToLower(out[i].Name) < strings.ToLower(out[j].Name) })
	return out, nil
}

// below is the rest of f (forward slashes, relative) under dir ("" is the
// root), when f is strictly below it.
func below(f, dir string) (string, bool) {
	if dir == "" {
		return f, f != ""
	}
	if strings.HasPrefix(f, dir+"/") {
		return f[len(dir)+1:], true
	}
	return "", false
}
