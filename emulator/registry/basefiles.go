package registry

import "strings"

// The programs an image's base holds that an exec into one of its
// containers may name. The published images here have no layers, so
// these are data: by what the image is built on, not read from it.
var (
	// Windows Server Core carries cmd and Windows PowerShell 5.1.
	servercoreFiles = []string{
		"/Windows/System32/cmd.exe",
		"/Windows/System32/HOSTNAME.EXE",
		"/Windows/System32/WindowsPowerShell/v1.0/powershell.exe",
	}
	// Nano Server carries cmd but no PowerShell ("PowerShell Core ...
	// is not included in the Nano Server base image", Microsoft's Nano
	// Server container docs; not verified against the image's layers
	// here).
	nanoserverFiles = []string{
		"/Windows/System32/cmd.exe",
		"/Windows/System32/HOSTNAME.EXE",
	}
	// busybox: one binary with its applets linked in /bin.
	busyboxFiles = []string{"/bin/busybox", "/bin/sh", "/bin/ls", "/bin/cat", "/bin/env", "/bin/printenv", "/bin/hostname", "/bin/pwd", "/bin/mkdir", "/bin/echo", "/bin/wget", "/bin/sleep"}
	// Debian (nginx's base): dash as sh, bash, coreutils.
	debianFiles = []string{"/bin/sh", "/bin/bash", "/bin/ls", "/bin/cat", "/usr/bin/env", "/usr/bin/printenv", "/bin/hostname", "/bin/pwd", "/bin/mkdir", "/bin/echo"}
)

// BaseFiles are the files of ref's base for os ("linux", "windows"), and
// what was assumed when the catalog does not know the image's base:
// "" when it does.
//
//   - Windows: nanoserver images have cmd only; every other Windows
//     image of the catalog (servercore, IIS, ASP.NET) is built on Server
//     Core. An unknown Windows image is taken as Server Core.
//   - Linux: busybox and Debian-based nginx as above; the Kubernetes
//     images from registry.k8s.io are distroless and have no shell
//     (kubernetes/release go-runner and the distroless bases). An unknown
//     Linux image is taken as a Debian-like distribution with sh.
func BaseFiles(ref, os string) (files []string, assumed string) {
	r := strings.ToLower(Canonical(ref))
	if os == "windows" {
		switch {
		case strings.HasPrefix(r, "registry.k8s.io/e2e-test-images/"):
			// Built on the e2e busybox image, itself on Nano Server
			// (test/images/*/BASEIMAGE, kubernetes v1.36.3).
			return append(append([]string(nil), nanoserverFiles...), e2eBusyboxWindowsFiles...), ""
		case strings.Contains(r, "nanoserver"):
			return nanoserverFiles, ""
		case strings.Contains(r, "servercore") || strings.Contains(r, "windows/server"):
			return servercoreFiles, ""
		}
		return servercoreFiles, "an unknown Windows image is taken to be built on Windows Server Core"
	}
	switch {
	case strings.HasPrefix(r, "docker.io/library/busybox:"):
		return busyboxFiles, ""
	case strings.HasPrefix(r, "docker.io/library/nginx:"):
		return debianFiles, ""
	case strings.HasPrefix(r, "registry.k8s.io/e2e-test-images/"):
		// busybox itself, and the alpine (busybox-based) images agnhost
		// and nginx are built on (test/images/*/BASEIMAGE); agnhost
		// adds bash (its Dockerfile's apk add).
		return append(append([]string(nil), busyboxFiles...), "/bin/bash"), ""
	case strings.HasPrefix(r, "registry.k8s.io/"):
		return nil, ""
	}
	return debianFiles, "an unknown Linux image is taken to be a Debian-like distribution with /bin/sh"
}
