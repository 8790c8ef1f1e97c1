package images

import (
	"fmt"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Support is how long a platform supports a Windows Server release for
// Kubernetes nodes.
type Support struct {
	// LastMinor is the last Kubernetes minor release (1.LastMinor) the
	// platform supports the release's node pools for; 0 when no end is
	// announced.
	LastMinor int
	// Ends is the date the platform stops producing node images and
	// security patches for it ("" when not announced).
	Ends string
	// Source is where the platform announced it.
	Source string
}

// WindowsSupport is AKS's support of each Windows Server release, the
// platform CAPZ and winkube follow: Windows Server 2019 retired on
// 2026-03-01 and no node pool of it can be created on Kubernetes 1.33 or
// newer (Azure/AKS release notes 2026-05-29); Windows Server 2022 is not
// supported on Kubernetes 1.37 or newer and retires on 2028-06-30 (Azure/AKS
// release notes 2026-06-19, which extended the earlier March 2027 date).
// Windows Server 2025 has no announced end.
var WindowsSupport = map[infrav1.WindowsServerVersion]Support{
	infrav1.WindowsServer2019: {LastMinor: 32, Ends: "2026-03-01", Source: "https://github.com/Azure/AKS/releases/tag/2026-05-29"},
	infrav1.WindowsServer2022: {LastMinor: 36, Ends: "2028-06-30", Source: "https://github.com/Azure/AKS/releases/tag/2026-06-19"},
}

// WindowsSupported reports whether the platform still supports nodes of
// release win on Kubernetes v, and when not, why.
func WindowsSupported(win infrav1.WindowsServerVersion, v Version) (bool, string) {
	s, ok := WindowsSupport[win]
	if !ok || s.LastMinor == 0 || !v.AtLeast(1, s.LastMinor+1) {
		return true, ""
	}
	return false, fmt.Sprintf("Windows Server %s is not supported for Kubernetes v1.%d or newer (retired %s, %s)", win, s.LastMinor+1, s.Ends, s.Source)
}

// WindowsRelease is the Windows Server release of a build ("10.0.17763" or
// "10.0.17763.6532" -> 2019), "" for a build winkube does not know.
func WindowsRelease(build string) infrav1.WindowsServerVersion {
	for rel, b := range WindowsBuild {
		if build == b || len(build) > len(b) && build[:len(b)+1] == b+"." {
			return rel
		}
	}
	return ""
}

// HostsRunning are the host builds that run a process-isolated container of
// imageBuild: the same build (Microsoft's "Windows container version
// compatibility", MicrosoftDocs/Virtualization-Documentation
// virtualization/windowscontainers/deploy-containers/version-compatibility.md
// at 00671ac3, "Build number (new release of Windows)"), and Windows Server
// 2025 hosts also run 2022 images (Microsoft's announcement of Windows
// Server 2022's retirement on AKS, 2024-03-15: image portability from
// Windows Server 2025 on).
func HostsRunning(imageBuild string) []string {
	if imageBuild == WindowsBuild[infrav1.WindowsServer2022] {
		return []string{imageBuild, WindowsBuild[infrav1.WindowsServer2025]}
	}
	return []string{imageBuild}
}
