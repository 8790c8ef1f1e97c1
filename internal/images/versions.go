// Package images chooses the default VM image of a node from its Kubernetes
// version, operating system, Windows Server release and container runtime,
// and holds the facts those choices rest on: which runtimes each version
// supports, which Windows build each release is, and how the reference images
// are named in the Azure Marketplace.
package images

import (
	"fmt"
	"strconv"
	"strings"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Version is a parsed Kubernetes version.
type Version struct {
	Major, Minor, Patch int
}

// ParseVersion parses "v1.36.3" or "1.36.3". Pre-release and build suffixes
// ("-rc.1", "+build") are accepted and dropped.
func ParseVersion(s string) (Version, error) {
	raw := s
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("Kubernetes version %q is not of the form v1.MINOR.PATCH (for example v1.36.3)", raw)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || (len(p) > 1 && p[0] == '0') {
			return Version{}, fmt.Errorf("Kubernetes version %q is not of the form v1.MINOR.PATCH (for example v1.36.3)", raw)
		}
		n[i] = v
	}
	if n[0] != 1 {
		return Version{}, fmt.Errorf("Kubernetes version %q: only major version 1 exists", raw)
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is at or above major.minor.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

const (
	// DockershimRemovedMinor is the first minor release without dockershim.
	DockershimRemovedMinor = 24
	// HostProcessMinor is the first minor release with HostProcess
	// containers, which winkube's Windows add-ons need.
	HostProcessMinor = 22
	// HostProcessGAMinor is the first release where HostProcess is GA, so the
	// WindowsHostProcessContainers feature gate must no longer be set.
	HostProcessGAMinor = 26
)

// NeedsHostProcessFeatureGate reports whether the WindowsHostProcessContainers
// feature gate must be turned on for the API server and kubelet.
func NeedsHostProcessFeatureGate(v Version) bool {
	return v.AtLeast(1, HostProcessMinor) && !v.AtLeast(1, HostProcessGAMinor)
}

// WindowsBuild is the OS build of each Windows Server release, as a Windows
// node reports it in node.kubernetes.io/windows-build.
var WindowsBuild = map[infrav1.WindowsServerVersion]string{
	infrav1.WindowsServer2019: "10.0.17763",
	infrav1.WindowsServer2022: "10.0.20348",
	infrav1.WindowsServer2025: "10.0.26100",
}

// firstWindowsMinor is the first Kubernetes minor release with reference
// images for each Windows release.
var firstWindowsMinor = map[infrav1.WindowsServerVersion]int{
	infrav1.WindowsServer2019: 18,
	infrav1.WindowsServer2022: 23,
	infrav1.WindowsServer2025: 32,
}

// CombinationError says which field of a VM spec makes a combination
// impossible: containerRuntime or windowsServerVersion.
type CombinationError struct {
	Field string
	Msg   string
}

func (e *CombinationError) Error() string { return e.Msg }

func combination(field, format string, args ...any) error {
	return &CombinationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidateRuntime refuses combinations of Kubernetes version, operating system,
// Windows release and runtime that cannot work, saying what to change.
func ValidateRuntime(v Version, os infrav1.OSType, win infrav1.WindowsServerVersion, runtime infrav1.ContainerRuntime) error {
	if runtime == "" {
		runtime = infrav1.Containerd
	}
	if runtime == infrav1.Dockershim && v.AtLeast(1, DockershimRemovedMinor) {
		return combination("containerRuntime", "container runtime dockershim was removed in Kubernetes v1.%d, so %s cannot use it: use containerd (the windows flavor) or Kubernetes v1.23 or older", DockershimRemovedMinor, v)
	}
	if os != infrav1.Windows {
		return nil
	}
	if runtime == infrav1.Containerd && !v.AtLeast(1, HostProcessMinor) {
		return combination("containerRuntime", "Windows nodes with containerd need HostProcess containers for kube-proxy and the CNI, which came in Kubernetes v1.%d; %s is older: use Kubernetes v1.%d or newer, or runtime dockershim", HostProcessMinor, v, HostProcessMinor)
	}
	if win == "" {
		return nil
	}
	first, ok := firstWindowsMinor[win]
	if !ok {
		return combination("windowsServerVersion", "Windows Server %q is not known: use 2019, 2022 or 2025", win)
	}
	if !v.AtLeast(1, first) {
		return combination("windowsServerVersion", "there are no Windows Server %s images for Kubernetes %s: the first are for v1.%d; use a newer Kubernetes version or an older Windows Server", win, v, first)
	}
	return nil
}
