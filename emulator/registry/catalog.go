package registry

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Windows Server builds as container images report them in os.version.
const (
	Build2016 = "10.0.14393.0"
	Build1709 = "10.0.16299.0"
	Build1803 = "10.0.17134.0"
	Build2019 = "10.0.17763.6532"
	Build2022 = "10.0.20348.2849"
	Build2025 = "10.0.26100.2314"
)

var (
	linuxAll = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}}
	// hostProcess images are built on the HostProcess base image, which
	// names no build: they run on any Windows host.
	hostProcess = []v1.Platform{{OS: "windows", Architecture: "amd64"}}
)

// MetricsServerImage is the metrics-server release the add-on runs; the
// machine runtime runs the same release's program (hack/tools/
// metrics-server pins it) as its container's process.
const MetricsServerImage = "registry.k8s.io/metrics-server/metrics-server:v0.8.0"

// The Azure Disk CSI driver and its sidecars, as the driver's Helm chart
// 1.34.5 pins them (kubernetes-sigs/azuredisk-csi-driver
// charts/v1.34.5/azuredisk-csi-driver/values.yaml, d983d613: baseRepo
// mcr.microsoft.com plus each repository and tag). One repository holds
// both driver images: the multi-platform tag the Linux controller and node
// plugin run, and the -windows-hp tag the Windows HostProcess DaemonSet
// runs.
const (
	AzureDiskRepository   = "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi"
	AzureDiskImage        = AzureDiskRepository + ":v1.34.5"
	AzureDiskWindowsImage = AzureDiskRepository + ":v1.34.5-windows-hp"
	// AzureDiskDriverName is the CSI driver's name (the chart's
	// driver.name), which its CSIDriver, StorageClass and sockets carry.
	AzureDiskDriverName         = "disk.csi.azure.com"
	CSIProvisionerImage         = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner:v6.3.0"
	CSIAttacherImage            = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-attacher:v4.12.0"
	CSIResizerImage             = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-resizer:v2.2.0"
	CSISnapshotterImage         = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-snapshotter:v8.6.0"
	CSILivenessProbeImage       = "mcr.microsoft.com/oss/v2/kubernetes-csi/livenessprobe:v2.19.0"
	CSINodeDriverRegistrarImage = "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-node-driver-registrar:v2.17.0"
)

// csiSidecarWindows: kubernetes-csi's release tools build a sidecar for
// Windows when its repository has a Dockerfile.Windows (release-tools/
// build.make push-multiarch), on nanoserver:1809 and nanoserver:ltsc2022
// (release-tools/prow.sh CSI_PROW_BUILD_PLATFORMS); node-driver-registrar
// v2.17.0 and livenessprobe v2.19.0 have one, the controller's sidecars
// do not.
var csiSidecarWindows = windows(Build2019, Build2022)

// web is what a web server image serves.
var web = []string{"80/tcp"}

func windows(builds ...string) []v1.Platform {
	out := make([]v1.Platform, 0, len(builds))
	for _, b := range builds {
		out = append(out, v1.Platform{OS: "windows", Architecture: "amd64", OSVersion: b})
	}
	return out
}

// Catalog is the images the local world publishes: what kubeadm deploys
// for kubernetesVersion (kubeadmImages, as `kubeadm config images list`
// prints them), the CNI and kube-proxy images winkube's flavors use, and
// the Windows and Linux images of the examples, each with the platforms
// the real image has.
func Catalog(kubernetesVersion string, kubeadmImages []string) []Image {
	v := strings.ReplaceAll(kubernetesVersion, "+", "_")
	out := []Image{}
	// The pause images and the e2e's test images as published, with
	// their Windows variants: kubeadm's list names pause too, which a
	// Linux-only entry would shadow.
	upstream := map[string]bool{}
	for _, u := range UpstreamTestImages() {
		upstream[u.Ref] = true
		out = append(out, u.Image)
	}
	for _, ref := range kubeadmImages {
		if upstream[Canonical(ref)] || upstream[ref] {
			continue
		}
		img := Image{Ref: ref, Platforms: linuxAll}
		if strings.Contains(ref, "/kube-proxy:") {
			img.Provides = "kube-proxy"
		}
		if strings.Contains(ref, "/coredns:") {
			// DNS, health (/health), readiness (/ready) and metrics.
			img.Listens = []string{"53/tcp", "8080/tcp", "8181/tcp", "9153/tcp"}
		}
		out = append(out, img)
	}
	out = append(out,
		// CNI: Calico (Linux and Windows) and flannel (Linux). No
		// flannel image for Windows is published (sig-windows-tools
		// removed its HostProcess flannel in 729ae7cd, 2025-04-11).
		Image{Ref: "docker.io/calico/node:" + CalicoVersion, Platforms: linuxAll, Listens: []string{"9099/tcp"}, // Felix's health port
			Process: map[string]Process{"linux": calicoNodeLinux}},
		Image{Ref: "docker.io/calico/cni:" + CalicoVersion, Platforms: linuxAll, Process: map[string]Process{"linux": calicoCNILinux}},
		Image{Ref: "docker.io/calico/kube-controllers:" + CalicoVersion, Platforms: linuxAll},
		// Typha: its sync port (syncproto.DefaultPort) and health port
		// (HealthPort), typha/pkg/syncproto/sync_proto.go and
		// typha/pkg/config/config_params.go at v3.30.7 (74485ea4). The
		// machine runtime runs the simulated Typha behind it.
		Image{Ref: "docker.io/calico/typha:" + CalicoVersion, Platforms: linuxAll, Listens: []string{"5473/tcp", "9098/tcp"}},
		Image{Ref: "docker.io/flannel/flannel-cni-plugin:v1.5.1-flannel2", Platforms: linuxAll},
		Image{Ref: "docker.io/calico/cni-windows:" + CalicoVersion, Platforms: windows(Build2019, Build2022), Process: map[string]Process{"windows": calicoCNIWindows}},
		Image{Ref: "docker.io/calico/node-windows:" + CalicoVersion, Platforms: windows(Build2019, Build2022), Process: map[string]Process{"windows": calicoNodeWindows}},
		Image{Ref: "docker.io/flannel/flannel:v0.25.6", Platforms: linuxAll, Process: map[string]Process{"linux": flannelLinux}},
		// kube-proxy for Windows: only the Calico variant is built
		// (sig-windows-tools a95c9b07 stopped the flannel one).
		Image{Ref: fmt.Sprintf("docker.io/sigwindowstools/kube-proxy:%s-calico-hostprocess", v), Platforms: hostProcess, Provides: "kube-proxy",
			Process: map[string]Process{"windows": kubeProxyWindows}},
		// csi-proxy serves the node's disk, volume and filesystem APIs on
		// named pipes (\\.\pipe\csi-proxy-<api>-<version>, csi-proxy
		// client/utils.go PipePath, eeba4706) while it runs: what a CSI
		// node plugin outside HostProcess needs.
		Image{Ref: "ghcr.io/kubernetes-sigs/sig-windows/csi-proxy:v1.1.3", Platforms: hostProcess, Provides: "csi-proxy", Process: map[string]Process{"windows": csiProxy}},
		// Workloads: process-isolated Windows images exist per build.
		Image{Ref: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019", Platforms: windows(Build2019), Listens: web},
		Image{Ref: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022", Platforms: windows(Build2022), Listens: web},
		Image{Ref: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2025", Platforms: windows(Build2025), Listens: web},
		Image{Ref: "mcr.microsoft.com/windows/servercore/iis:latest", Platforms: windows(Build2019, Build2022, Build2025), Listens: web},
		Image{Ref: "mcr.microsoft.com/windows/servercore:ltsc2019", Platforms: windows(Build2019)},
		Image{Ref: "mcr.microsoft.com/windows/servercore:ltsc2022", Platforms: windows(Build2022)},
		Image{Ref: "mcr.microsoft.com/windows/servercore:ltsc2025", Platforms: windows(Build2025)},
		Image{Ref: "mcr.microsoft.com/windows/nanoserver:ltsc2022", Platforms: windows(Build2022)},
		Image{Ref: "mcr.microsoft.com/dotnet/framework/aspnet:4.8-windowsservercore-ltsc2022", Platforms: windows(Build2022), Listens: web},
		Image{Ref: "mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0", Platforms: hostProcess},
		Image{Ref: "docker.io/library/nginx:1.27", Platforms: linuxAll, Listens: web},
		Image{Ref: "docker.io/library/nginx:latest", Platforms: linuxAll, Listens: web},
		Image{Ref: "docker.io/library/busybox:1.36", Platforms: linuxAll},
		// Seed 003's images, of Windows Server 2016 and the semi-annual
		// builds after it: Docker Hub's microsoft/iis listed 2016
		// (10.0.14393), 1709 (10.0.16299) and 1803 (10.0.17134) images
		// in 2018 (microsoft/iis-docker#105) and was left there when
		// Microsoft moved to mcr.microsoft.com (iis-docker#159), so its
		// index has no entry a 2019 or later host runs. redis's
		// 3.0-nanoserver tag (3.0.504, docker-library/official-images#2546)
		// was built FROM microsoft/nanoserver, Windows Server 2016's
		// Nano Server, exposes 6379, and Windows tags stopped being
		// built after docker-library/redis#99. The revisions in the
		// OS versions are placeholders: no source here gives them.
		Image{Ref: "docker.io/microsoft/iis:latest", Platforms: windows(Build2016, Build1709, Build1803), Listens: web},
		Image{Ref: "docker.io/library/redis:3.0-nanoserver", Platforms: windows(Build2016), Listens: []string{"6379/tcp"}},
		// metrics-server v0.8.0 (its release manifest's image,
		// kubernetes-sigs/metrics-server manifests/components/release),
		// serving HTTPS on the --secure-port its manifest sets, 10250
		// (manifests/base/deployment.yaml). Built for amd64, arm, arm64,
		// ppc64le and s390x (Makefile ALL_ARCHITECTURES); the ones a
		// node here can be are listed.
		Image{Ref: MetricsServerImage, Platforms: linuxAll, Listens: []string{"10250/tcp"}},
		// The Azure Disk CSI driver (kubernetes-sigs/azuredisk-csi-driver
		// Makefile at v1.34.5, fb4981e3): the release tag is a manifest
		// list of linux/amd64, linux/arm64 and Windows 1809 and ltsc2022
		// (nanoserver) images; the -windows-hp tag is one image on the
		// HostProcess base image, which runs on any Windows build. The
		// ports it serves come from its flags (--metrics-address, the
		// liveness-probe sidecar's --http-endpoint or --health-port),
		// which differ between the controller and the node plugins, so
		// none is listed here: the pods declare theirs.
		Image{Ref: AzureDiskImage, Platforms: append(append([]v1.Platform(nil), linuxAll...), windows(Build2019, Build2022)...),
			Process: map[string]Process{"linux": azureDiskLinux, "windows": azureDiskWindows}},
		Image{Ref: AzureDiskWindowsImage, Platforms: hostProcess, Process: map[string]Process{"windows": azureDiskHostProcess}},
		// kubernetes-csi's sidecars, built for linux amd64, arm, arm/v7,
		// arm64, ppc64le and s390x (release-tools/prow.sh; the ones a
		// node here can be are listed) and, for the node sidecars,
		// Windows.
		Image{Ref: CSIProvisionerImage, Platforms: linuxAll, Process: map[string]Process{"linux": csiProvisioner}},
		Image{Ref: CSIAttacherImage, Platforms: linuxAll, Process: map[string]Process{"linux": csiAttacher}},
		Image{Ref: CSIResizerImage, Platforms: linuxAll, Process: map[string]Process{"linux": csiResizer}},
		Image{Ref: CSISnapshotterImage, Platforms: linuxAll, Process: map[string]Process{"linux": csiSnapshotter}},
		// livenessprobe serves /healthz on --health-port (9808 by
		// default), or on --http-endpoint's address when that is set
		// (the two exclude each other): cmd/livenessprobe/main.go
		// defaultHealthzPort, kubernetes-csi/livenessprobe e60f18af.
		Image{Ref: CSILivenessProbeImage, Platforms: append(append([]v1.Platform(nil), linuxAll...), csiSidecarWindows...),
			Listens: []string{"9808/tcp"}, ListenFlags: []string{"--http-endpoint", "--health-port"},
			Process: map[string]Process{"linux": csiLivenessProbeLinux, "windows": csiLivenessProbeWindows}},
		Image{Ref: CSINodeDriverRegistrarImage, Platforms: append(append([]v1.Platform(nil), linuxAll...), csiSidecarWindows...),
			Process: map[string]Process{"linux": csiNodeDriverRegistrarLinux, "windows": csiNodeDriverRegistrarWindows}},
	)
	// cloud-provider-azure's releases, one per Kubernetes minor; from
	// v1.32 published under mcr.microsoft.com/oss/v2. The node manager's
	// image also runs as a Windows HostProcess container.
	for _, v := range cloudProviderAzureReleases {
		repo := "mcr.microsoft.com/oss/kubernetes"
		if v >= "v1.32" {
			repo = "mcr.microsoft.com/oss/v2/kubernetes"
		}
		out = append(out,
			Image{Ref: repo + "/azure-cloud-controller-manager:" + v, Platforms: linuxAll},
			Image{Ref: repo + "/azure-cloud-node-manager:" + v, Platforms: append(append([]v1.Platform(nil), linuxAll...), hostProcess...),
				Process: map[string]Process{"windows": cloudNodeManagerWindows}})
	}
	return out
}

// cloudProviderAzureReleases are the releases cloud-provider-azure's Helm
// chart installs for Kubernetes 1.21 to 1.36.
var cloudProviderAzureReleases = []string{"v1.0.23", "v1.1.27", "v1.23.30", "v1.24.22", "v1.25.24", "v1.26.22", "v1.27.21",
	"v1.28.14", "v1.29.15", "v1.30.15", "v1.31.12", "v1.32.17", "v1.33.12", "v1.34.9", "v1.35.4", "v1.36.0"}

// PushAll publishes images, stopping at the first failure.
func (r *Registry) PushAll(ctx context.Context, images []Image) error {
	for _, img := range images {
		if err := r.Push(ctx, img); err != nil {
			return fmt.Errorf("publish %s: %w", img.Ref, err)
		}
	}
	return nil
}
