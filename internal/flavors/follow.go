package flavors

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/winkube/winkube/internal/images"
)

// Version-bound add-ons: the images of an add-on ConfigMap that depend on
// the cluster's Kubernetes version, which must move when the control plane
// does. Cluster API's KubeadmControlPlane moves only the DaemonSet named
// kube-proxy, once every control-plane Machine is up to date
// (sigs.k8s.io/cluster-api v1.14.2, controlplane/kubeadm/pkg/
// workload_cluster.go UpdateKubeProxyImageInfo, called from
// controlplane/kubeadm/reconcilers/kubeadmcontrolplane/
// kubeadmcontrolplane_controller.go after the rollout): nothing moves the
// Windows kube-proxy or the cloud provider, whose release follows the
// Kubernetes minor (the cloud-provider-azure chart's version table).
var (
	// kubeProxyWindowsRef is sigwindowstools' kube-proxy, tagged with the
	// Kubernetes version ('+' written '_') and a CNI suffix.
	kubeProxyWindowsRef = regexp.MustCompile(`((?:[A-Za-z0-9.\-]+(?::[0-9]+)?/)*sigwindowstools/kube-proxy):v[0-9]+\.[0-9]+\.[0-9]+[^\s"'-]*(-[A-Za-z0-9-]+)`)
	// cloudProviderRef is either cloud-provider-azure image, from any
	// repository.
	cloudProviderRef = regexp.MustCompile(`([A-Za-z0-9.\-:/]+)/(azure-cloud-controller-manager|azure-cloud-node-manager):(v[0-9][^\s"']*)`)
)

// The fixed parts of the references above: a manifest without them has
// none to move.
const (
	kubeProxyWindowsName = "sigwindowstools/kube-proxy:"
	cloudProviderName    = "/azure-cloud-"
)

// ImageChange is one image reference FollowVersion moved.
type ImageChange struct {
	From, To string
}

// FollowVersion rewrites the version-bound images in an add-on manifest
// (a ClusterResourceSet ConfigMap's YAML, as the flavors and the clusterctl
// templates render it) to Kubernetes version v: kube-proxy for Windows to
// v's tag, and the cloud controller and node managers to the release the
// cloud-provider-azure chart picks for v's minor (from the chart's
// repository when the manifest uses one of them, otherwise from the
// manifest's own mirror). It returns the manifest, what changed, and an
// error naming an image that has no release for v (the manifest is then
// left as it was for that image).
func FollowVersion(manifest string, v images.Version) (string, []ImageChange, error) {
	var changes []ImageChange
	var errs []string
	// Most add-on manifests (Calico's, hundreds of KiB) name no
	// version-bound image: a regexp that starts with a character class
	// tries a match at every byte of them, on every reconcile of every
	// Cluster event (4% of winkube's CPU in a 1+100+400 bring-up), where a
	// search for the images' fixed names skips them.
	out := manifest
	if strings.Contains(manifest, kubeProxyWindowsName) {
		tag := imageTag(v.String())
		out = kubeProxyWindowsRef.ReplaceAllStringFunc(manifest, func(ref string) string {
			m := kubeProxyWindowsRef.FindStringSubmatch(ref)
			to := m[1] + ":" + tag + m[2]
			if to != ref {
				changes = append(changes, ImageChange{ref, to})
			}
			return to
		})
	}
	if !strings.Contains(out, cloudProviderName) {
		return out, changes, nil
	}
	ccm, cnm, ok := CloudProviderAzureImages(v.Minor)
	out = cloudProviderRef.ReplaceAllStringFunc(out, func(ref string) string {
		m := cloudProviderRef.FindStringSubmatch(ref)
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: cloud-provider-azure has no release for Kubernetes 1.%d (the %s knows 1.21 to 1.36)", ref, v.Minor, cloudProviderAzureChart))
			return ref
		}
		to := ccm
		if m[2] == "azure-cloud-node-manager" {
			to = cnm
		}
		if m[1] != cloudProviderAzureRepository && m[1] != cloudProviderAzureRepositoryV2 {
			// A mirror: its path stays, the release follows.
			to = m[1] + "/" + m[2] + ":" + to[strings.LastIndex(to, ":")+1:]
		}
		if to != ref {
			changes = append(changes, ImageChange{ref, to})
		}
		return to
	})
	if len(errs) > 0 {
		return out, changes, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, changes, nil
}

// KubeProxyWindowsImage is the Calico flavors' kube-proxy for Windows for
// Kubernetes v.
func KubeProxyWindowsImage(v images.Version) string {
	return fmt.Sprintf("%s:%s-calico-hostprocess", kubeProxyImage, imageTag(v.String()))
}

// AddonRange is the Kubernetes minors an add-on release is tested or known
// to work with, and where its project says so.
type AddonRange struct {
	Addon, Release string
	// Label is the Cluster label that selects the add-on's
	// ClusterResourceSet ("" for one every cluster of the flavor gets).
	Label string
	// FirstMinor and LastMinor bound the minors (LastMinor 0: no end).
	FirstMinor, LastMinor int
	// Beyond is what the project says of a minor past LastMinor.
	Beyond string
	Source string
}

// AddonRanges are the Kubernetes ranges of the add-on releases the
// flavors install whose images do not follow the Kubernetes version.
var AddonRanges = []AddonRange{
	{Addon: "Calico", Release: calicoVersion, Label: "cni", FirstMinor: 31, LastMinor: 33,
		Beyond: "newer versions may work but are not tested; upgrading Calico to a release tested against the newer Kubernetes is recommended",
		Source: "tigera/docs calico_versioned_docs/version-3.30/_includes/partials/_system-requirements.mdx (1bbcbaed): tested against v1.31, v1.32, v1.33"},
	{Addon: "Azure Disk CSI driver", Release: azureDiskVersion, Label: AzureDiskCSILabel, FirstMinor: 20,
		Source: "kubernetes-sigs/azuredisk-csi-driver README.md (751203d1), Container Images & Kubernetes Compatibility: V1 releases support 1.20+"},
	{Addon: "metrics-server", Release: "v0.8.0", Label: MetricsServerLabel, FirstMinor: 31,
		Source: "kubernetes-sigs/metrics-server README.md (5ed5d3a2), Compatibility Matrix: 0.8.x supports 1.31+"},
}
