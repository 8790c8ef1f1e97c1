package flavors

import (
	"regexp"
	"strings"
)

// AddonImage is an image the flavors' add-ons run: its repository, the
// tags they use, and the public source that shows those tags are
// published. TestEveryEmittedImageIsPublished fails on an image a flavor
// emits that is not here.
type AddonImage struct {
	Repository string
	// Tags is the tags' pattern (a regular expression).
	Tags   string
	Source string
}

// AddonImages is every image the flavors emit, but the ones the user names
// (the flannel flavors' Windows images) and winkube's own admission image.
var AddonImages = []AddonImage{
	{"docker.io/calico/node", `v3\.30\.7`, "Calico v3.30.7 release; tigera/operator v1.38.16 config/calico_versions.yml installs it"},
	{"docker.io/calico/cni", `v3\.30\.7`, "Calico v3.30.7 release; tigera/operator v1.38.16 config/calico_versions.yml"},
	{"docker.io/calico/kube-controllers", `v3\.30\.7`, "Calico v3.30.7 release; tigera/operator v1.38.16 config/calico_versions.yml"},
	{"docker.io/calico/typha", `v3\.30\.7`, "Calico v3.30.7 release, manifests/calico-typha.yaml; tigera/operator v1.38.16 config/calico_versions.yml"},
	{"docker.io/calico/node-windows", `v3\.30\.7`, "Calico v3.30.7 release (node/Makefile WINDOWS_IMAGE, manifest list for 1809 and ltsc2022); tigera/operator v1.38.16"},
	{"docker.io/calico/cni-windows", `v3\.30\.7`, "Calico v3.30.7 release (cni-plugin/Makefile WINDOWS_IMAGE); tigera/operator v1.38.16"},
	{"docker.io/flannel/flannel", `v0\.25\.6`, "flannel-io/flannel v0.25.6 release, Documentation/kube-flannel.yml"},
	{"docker.io/flannel/flannel-cni-plugin", `v1\.5\.1-flannel2`, "flannel-io/flannel v0.25.6 Documentation/kube-flannel.yml"},
	{"docker.io/sigwindowstools/kube-proxy", `v1\.(3[3-9]|[4-9][0-9])\.[0-9]+-calico-hostprocess`,
		"kubernetes-sigs/sig-windows-tools .github/workflows/sync-kube-proxy-images.yaml (77474f59): every stable Kubernetes release from 1.33 is built and pushed"},
	{"ghcr.io/kubernetes-sigs/sig-windows/csi-proxy", `v1\.1\.3`,
		"kubernetes-sigs/sig-windows-tools hostprocess/csi-proxy/VERSION and .github/workflows/csi-proxy.yml; the CVE-2023-3893 announcement names the v1.1.3 image"},
	{"registry.k8s.io/metrics-server/metrics-server", `v0\.8\.0`, "kubernetes-sigs/metrics-server v0.8.0 (d66279c6) manifests/components/release/kustomization.yaml: the release manifest's image"},
	{azureDiskRepo, `v1\.34\.5(-windows-hp)?`, azureDiskChartSource + " values.yaml image.azuredisk; the driver's Makefile (v1.34.5, fb4981e3) pushes the release tag (linux amd64/arm64, Windows 1809/ltsc2022) and its -windows-hp HostProcess image"},
	{"mcr.microsoft.com/oss/v2/kubernetes-csi/csi-provisioner", `v6\.3\.0`, azureDiskChartSource + " values.yaml image.csiProvisioner"},
	{"mcr.microsoft.com/oss/v2/kubernetes-csi/csi-attacher", `v4\.12\.0`, azureDiskChartSource + " values.yaml image.csiAttacher"},
	{"mcr.microsoft.com/oss/v2/kubernetes-csi/csi-snapshotter", `v8\.6\.0`, azureDiskChartSource + " values.yaml snapshot.image.csiSnapshotter"},
	{"mcr.microsoft.com/oss/v2/kubernetes-csi/csi-resizer", `v2\.2\.0`, azureDiskChartSource + " values.yaml image.csiResizer"},
	{"mcr.microsoft.com/oss/v2/kubernetes-csi/livenessprobe", `v2\.19\.0`, azureDiskChartSource + " values.yaml image.livenessProbe"},
	{"mcr.microsoft.com/oss/v2/kubernetes-csi/csi-node-driver-registrar", `v2\.17\.0`, azureDiskChartSource + " values.yaml image.nodeDriverRegistrar"},
	{"mcr.microsoft.com/oss/kubernetes/azure-cloud-controller-manager", `v1\.(0|1|2[3-9]|3[01])\.[0-9]+`, "kubernetes-sigs/cloud-provider-azure helm chart: the release per Kubernetes minor"},
	{"mcr.microsoft.com/oss/kubernetes/azure-cloud-node-manager", `v1\.(0|1|2[3-9]|3[01])\.[0-9]+`, "kubernetes-sigs/cloud-provider-azure helm chart: the release per Kubernetes minor"},
	{"mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager", `v1\.3[2-6]\.[0-9]+`, "kubernetes-sigs/cloud-provider-azure helm chart: from v1.32 under oss/v2"},
	{"mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager", `v1\.3[2-6]\.[0-9]+`, "kubernetes-sigs/cloud-provider-azure helm chart: from v1.32 under oss/v2"},
}

// azureDiskChartSource is the Azure Disk CSI driver's Helm chart release
// that pins its images.
const azureDiskChartSource = "kubernetes-sigs/azuredisk-csi-driver charts/v1.34.5/azuredisk-csi-driver (d983d613)"

// PublishedAddonImage finds the table's entry for an image reference.
func PublishedAddonImage(ref string) (AddonImage, bool) {
	repo, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	for _, img := range AddonImages {
		if img.Repository == repo && regexp.MustCompile(`^(`+img.Tags+`)$`).MatchString(tag) {
			return img, true
		}
	}
	return AddonImage{}, false
}
