package registry

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// UpstreamImage is an image the local world publishes as its publisher
// built it: its manifest list's platforms and each platform's config
// (Entrypoint, Cmd, WorkingDir, Env) from the build files cited in Source.
// What the registry serves is this image's metadata without its layers, so
// the digest it serves is computed from the recorded manifests and is not
// the published one: Digest is the published manifest list's digest, for
// the reader, where a source here states it, and "" where none does
// (DigestSource then says so).
type UpstreamImage struct {
	Image
	Digest       string
	DigestSource string
	Source       string
}

// e2eImagesManifest is where Kubernetes v1.36.3's e2e names its images:
// kubernetes/kubernetes test/utils/image/manifest.go at tag v1.36.3, read
// from the module k8s.io/kubernetes@v1.36.3 (go.sum
// h1:qDQdoMiluAE2Eab6Fa52YV+WjiGz9mZFFoagEA6cI+o=; the tag's commit is not
// in the search index): Agnhost 2.63.0, BusyBox 1.37.0-1, Nginx 1.15-4
// (registry.k8s.io/e2e-test-images), Pause 3.10.2 (registry.k8s.io).
const e2eImagesManifest = "kubernetes/kubernetes test/utils/image/manifest.go@v1.36.3"

// The promoter's records of what registry.k8s.io serves: each tag's
// manifest list digest.
const (
	promotedE2E   = "kubernetes/k8s.io registry.k8s.io/images/k8s-staging-e2e-test-images/images.yaml@e10ab5f95c9786e66745737e865fd6f593358eae"
	promotedPause = "kubernetes/k8s.io registry.k8s.io/images/k8s-staging-kubernetes/images.yaml@ecf019a88caa0923c610e8982ca44a460c0303e5"
)

// The Windows builds in the e2e images' BASEIMAGE files are named by
// release (1809, ltsc2022, ltsc2025); the os.version an image then
// carries is its base image's, whose revision no source here gives: the
// catalog's Build2019/2022/2025 stand in, so only the build (the part a
// host must match) is real.
var (
	// linuxE2E: the e2e images' BASEIMAGE files since alpine 3.21 and
	// busybox 1.37 list no linux/arm.
	linuxE2E = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"},
		{OS: "linux", Architecture: "ppc64le"}, {OS: "linux", Architecture: "s390x"}}
	// linuxPause: build/pause/Makefile ALL_ARCH.linux.
	linuxPause = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm"}, {OS: "linux", Architecture: "arm64"},
		{OS: "linux", Architecture: "ppc64le"}, {OS: "linux", Architecture: "s390x"}}
)

func platforms(sets ...[]v1.Platform) []v1.Platform {
	var out []v1.Platform
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

// The e2e images' processes, from their Dockerfiles at v1.36.3
// (test/images/<name>/Dockerfile and Dockerfile_windows).
var (
	// agnhost: ENTRYPOINT ["/agnhost"], CMD ["pause"] on both OSes; the
	// Windows image sets PATH. Its EXPOSE list (80 8080 8081 9376, and
	// 5000 on Linux) is not recorded as ports it serves: which it serves
	// depends on the subcommand.
	agnhostLinux = Process{
		Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
		Files:  []string{"/agnhost", "/agnhost-2", "/coredns", "/bin/sh", "/bin/bash", "/usr/bin/curl", "/usr/bin/nc", "/usr/bin/dig", "/usr/bin/nslookup"},
		Source: "kubernetes/kubernetes test/images/agnhost/Dockerfile@v1.36.3",
	}
	agnhostWindows = Process{
		Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
		Env:    []string{`PATH=C:\dig\;C:\bin\;C:\curl\;C:\Windows\system32;C:\Windows;C:\Program Files\PowerShell;`},
		Files:  append([]string{"/agnhost", "/agnhost-2", "/coredns.exe", "/filePermissions.ps1"}, e2eBusyboxWindowsFiles...),
		Source: "kubernetes/kubernetes test/images/agnhost/Dockerfile_windows@v1.36.3",
	}
	// busybox on Linux is docker.io/library/busybox:1.37.0 as it is
	// (its Dockerfile only names the base), whose CMD is ["sh"]
	// (docker-library/busybox; not read from a source here).
	e2eBusyboxLinux = Process{
		Cmd:    []string{"sh"},
		Files:  busyboxFiles,
		Source: "kubernetes/kubernetes test/images/busybox/Dockerfile@v1.36.3",
	}
	// busybox on Windows: Nano Server with busybox.exe and its applets
	// in C:\bin, curl, nc, dig and nslookup, PowerShell 7, USER
	// ContainerAdministrator, ENTRYPOINT ["cmd.exe", "/s", "/c"].
	e2eBusyboxWindows = Process{
		Entrypoint: []string{"cmd.exe", "/s", "/c"},
		Env: []string{`PATH=C:\dig\;C:\bin;C:\curl;C:\Windows\System32;C:\Windows;C:\Program Files\PowerShell;`,
			`ProgramFiles=C:\Program Files`, `LOCALAPPDATA=C:\Users\ContainerAdministrator\AppData\Local`,
			`PSModuleAnalysisCachePath=C:\Users\ContainerAdministrator\AppData\Local\Microsoft\Windows\PowerShell\docker\ModuleAnalysisCache`,
			`PSCORE=C:\Program Files\PowerShell\pwsh.exe`},
		Files:  e2eBusyboxWindowsFiles,
		Source: "kubernetes/kubernetes test/images/busybox/Dockerfile_windows@v1.36.3",
	}
	// nginx 1.15-4 on Linux is nginx:1.15-alpine, which runs
	// nginx -g "daemon off;" (docker-library/nginx; not read from a
	// source here); on Windows, nginx.exe on the busybox image, started
	// through busybox's sh (test/images/nginx/Dockerfile_windows).
	e2eNginxLinux = Process{
		Cmd:    []string{"nginx", "-g", "daemon off;"},
		Files:  []string{"/usr/sbin/nginx", "/bin/sh"},
		Source: "kubernetes/kubernetes test/images/nginx/Dockerfile@v1.36.3 (FROM nginx:1.15-alpine for 1.15-4)",
	}
	e2eNginxWindows = Process{
		Entrypoint: []string{"/bin/sh", "-c", " cd /usr/share/nginx && ./nginx.exe"},
		Env:        e2eBusyboxWindows.Env,
		Files:      append([]string{"/usr/share/nginx/nginx.exe"}, e2eBusyboxWindowsFiles...),
		Source:     "kubernetes/kubernetes test/images/nginx/Dockerfile_windows@v1.36.3",
	}
	// pause: ENTRYPOINT ["/pause"] as USER 65535 on Linux
	// (build/pause/Dockerfile), ["/pause.exe"] on Windows
	// (build/pause/Dockerfile_windows), kubernetes v1.36.3.
	pauseLinux   = Process{Entrypoint: []string{"/pause"}, Files: []string{"/pause"}, Source: "kubernetes/kubernetes build/pause/Dockerfile@v1.36.3"}
	pauseWindows = Process{Entrypoint: []string{"/pause.exe"}, Files: []string{"/pause.exe", "/Windows/System32/wincat.exe"}, Source: "kubernetes/kubernetes build/pause/Dockerfile_windows@v1.36.3"}

	// nonroot: its base image with only USER changed: 1234 on Linux
	// (debian-base), ContainerUser on Windows (Nano Server, whose
	// cmd.exe the e2e's commands run); test/images/nonroot/Dockerfile
	// and Dockerfile_windows.
	nonrootLinux = Process{User: "1234", Files: []string{"/bin/sh"},
		Source: "kubernetes/kubernetes test/images/nonroot/Dockerfile@v1.36.3"}
	nonrootWindows = Process{User: "ContainerUser", Files: []string{"/Windows/System32/cmd.exe"},
		Source: "kubernetes/kubernetes test/images/nonroot/Dockerfile_windows@v1.36.3"}

	// e2eBusyboxWindowsFiles: what the e2e busybox image adds to Nano
	// Server that commands name (BUSYBOX_EXES links, curl, nc, dig).
	e2eBusyboxWindowsFiles = []string{"/bin/busybox.exe", "/bin/sh.exe", "/bin/ls.exe", "/bin/cat.exe", "/bin/wget.exe", "/bin/uname.exe",
		"/bin/hostname.exe", "/bin/sleep.exe", "/bin/echo.exe", "/bin/nc.exe", "/curl/curl.exe", "/dig/dig.exe", "/dig/nslookup.exe",
		"/Program Files/PowerShell/pwsh.exe", "/Windows/System32/cmd.exe"}
)

// UpstreamTestImages are the images Kubernetes v1.36.3's e2e tests run
// (e2eImagesManifest) and the pause tags the world's sandboxes and kubeadm
// use, as published.
func UpstreamTestImages() []UpstreamImage {
	pause := func(tag, digest, digestSource, windowsNote string, builds ...string) UpstreamImage {
		return UpstreamImage{
			Image: Image{Ref: "registry.k8s.io/pause:" + tag, Platforms: platforms(linuxPause, windows(builds...)),
				Process: map[string]Process{"linux": pauseLinux, "windows": pauseWindows}},
			Digest: digest, DigestSource: digestSource,
			Source: "kubernetes/kubernetes build/pause/Makefile and CHANGELOG.md@v1.36.3: " + windowsNote,
		}
	}
	return []UpstreamImage{
		// 3.10: the sandbox image of 2019 and 2022 nodes
		// (internal/nodejoin PauseImage); 3.10.1: kubeadm v1.35's
		// (constants.PauseVersion); 3.10.2: kubeadm v1.36's, the e2e's
		// and 2025 sandboxes'. The Windows os.versions are those of the
		// windows-pause-image-base manifest list; CHANGELOG 3.6 added
		// ltsc2022, 3.9 left 1809 and ltsc2022, 3.10.2 added ltsc2025.
		pause("3.10", "sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a", promotedPause,
			"Windows 1809 and ltsc2022", Build2019, Build2022),
		pause("3.10.1", "sha256:278fb9dbcca9518083ad1e11276933a2e96f23de604a3a08cc3c80002767d24c", promotedPause,
			"Windows 1809 and ltsc2022 (base image v0.4.1)", Build2019, Build2022),
		pause("3.10.2", "",
			"not in "+promotedPause+", which predates 3.10.2; third-party manifests in the search index pin sha256:f548e0e8e3dc1896ca956272154dde3314e8cc4fde0a57577ee9fa1c63f5baf4, not confirmed here",
			"Windows 1809, ltsc2022 and ltsc2025 (base image oss/v2 v0.4.1 'to add Windows Server 2025')", Build2019, Build2022, Build2025),
		{
			Image: Image{Ref: "registry.k8s.io/e2e-test-images/agnhost:2.63.0", Platforms: platforms(linuxE2E, windows(Build2019, Build2022, Build2025)),
				Process: map[string]Process{"linux": agnhostLinux, "windows": agnhostWindows}},
			Digest: "sha256:a62f40481e05709988fe44e5035b2e0f553cd52bf0ae4e83614928255b00e8c1", DigestSource: promotedE2E,
			// VERSION is 2.63.0 at v1.36.3: the BASEIMAGE then is
			// this tag's.
			Source: e2eImagesManifest + "; test/images/agnhost/BASEIMAGE and VERSION@v1.36.3",
		},
		{
			Image: Image{Ref: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", Platforms: platforms(linuxE2E, windows(Build2019, Build2022)),
				Process: map[string]Process{"linux": e2eBusyboxLinux, "windows": e2eBusyboxWindows}},
			Digest: "sha256:0ffbe172f8d245c83f285c6992b452c53d085661e03ddfd3b484332026e6c8bb", DigestSource: promotedE2E,
			// BASEIMAGE at v1.36.3 is 1.37.0-2's, which added
			// ltsc2025 (kubernetes/k8s.io#8197 promoting it for
			// kubernetes/kubernetes#132235 "Add Windows Server 2025
			// (ltsc2025) to BASEIMAGEs"): 1.37.0-1 has 1809 and
			// ltsc2022 only.
			Source: e2eImagesManifest + "; test/images/busybox/BASEIMAGE@v1.36.3 less ltsc2025 (added in 1.37.0-2, kubernetes/k8s.io#8197)",
		},
		{
			// The [sig-windows] SecurityContext specs' image (NonRoot
			// 1.5 in e2eImagesManifest). BASEIMAGE at v1.36.3 is
			// 1.6.0's (VERSION), with ltsc2025 added as for busybox
			// (kubernetes/kubernetes#132235): 1.5 has 1809 and ltsc2022.
			Image: Image{Ref: "registry.k8s.io/e2e-test-images/nonroot:1.5", Platforms: platforms(linuxE2E, windows(Build2019, Build2022)),
				Process: map[string]Process{"linux": nonrootLinux, "windows": nonrootWindows}},
			Digest: "sha256:4f7a587cdbc2aec71473e791e5e783355955efaaf9b1b8e11193c45fe34c89c5", DigestSource: promotedE2E,
			Source: e2eImagesManifest + "; test/images/nonroot/BASEIMAGE and VERSION@v1.36.3 less ltsc2025",
		},
		{
			Image: Image{Ref: "registry.k8s.io/e2e-test-images/nginx:1.15-4", Platforms: platforms(linuxPause, windows(Build2019, Build2022)), Listens: web,
				Process: map[string]Process{"linux": e2eNginxLinux, "windows": e2eNginxWindows}},
			Digest: "sha256:db048754ae68ae337d8fa96494c96d2a1204c3320f5dcf7e8e71085adec85da6", DigestSource: promotedE2E,
			// 1.15-4 was built from test/images/nginx-new before
			// alpine 3.21 and ltsc2025: its BASEIMAGE then listed
			// linux/arm too and Windows 1809 and ltsc2022 (as
			// nginx-new/BASEIMAGE at 030880a5 still does); no source
			// here gives the exact file of that build.
			Source: e2eImagesManifest + "; test/images/nginx-new/BASEIMAGE@030880a5dc5449403c6d1f0aa146a7dc21d6c6dc (platforms; the 1.15-4 build's own file is not in the index)",
		},
	}
}
