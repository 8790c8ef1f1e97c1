package flavors

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/winkube/winkube/internal/images"
)

// WindowsAddons say which of the Windows add-ons the flavors deliver are
// wanted for a cluster that no flavor made (winkube node join
// --apply-addons): the same objects the flavors' ClusterResourceSets
// apply, rendered for that cluster's CNI and Kubernetes version.
type WindowsAddons struct {
	// CNI is "calico" or "flannel", as the cluster runs it.
	CNI string
	// KubernetesVersion is the cluster's ("v1.34.2").
	KubernetesVersion string
	// CalicoVersion is the release the cluster's Linux calico-node runs;
	// the Windows DaemonSet must be the same one.
	CalicoVersion string
	// PodCIDR is the flannel network (net-conf.json's Network); empty:
	// the flavors' default.
	PodCIDR string
	// KubeProxy and CNIDaemonSet pick the add-ons to render.
	KubeProxy, CNIDaemonSet bool
	// FlannelWindowsImage and KubeProxyWindowsImage are the user's images
	// for flannel, of which none is published (FlannelImagesMissing).
	FlannelWindowsImage, KubeProxyWindowsImage string
}

// WindowsAddonObjects renders the chosen add-ons, or says why they cannot
// be rendered for that cluster.
func WindowsAddonObjects(a WindowsAddons) ([]runtime.Object, error) {
	v, err := images.ParseVersion(a.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	var c cni
	switch a.CNI {
	case "calico":
		c = cniOf(Windows)
		if a.CNIDaemonSet && a.CalicoVersion != calicoVersion {
			return nil, fmt.Errorf("the cluster runs Calico %s and winkube renders Calico for Windows %s only: apply calico-node-windows of Calico %s yourself (or move the cluster to Calico %s)",
				orUnknown(a.CalicoVersion), calicoVersion, orUnknown(a.CalicoVersion), calicoVersion)
		}
	case "flannel":
		c = cniOf(WindowsFlannel)
		if a.PodCIDR != "" {
			c.podCIDR = a.PodCIDR
		}
		var missing []error
		if a.KubeProxy && a.KubeProxyWindowsImage == "" {
			missing = append(missing, errors.New("flannel: no kube-proxy image for Windows is published for it: build one and name it with --kube-proxy-windows-image"))
		}
		if a.CNIDaemonSet && a.FlannelWindowsImage == "" {
			missing = append(missing, errors.New("flannel: no flannel image for Windows is published: build one and name it with --flannel-windows-image"))
		}
		if err := errors.Join(missing...); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no Windows add-ons for CNI %q: winkube renders them for calico and flannel", a.CNI)
	}
	b := &builder{o: Options{KubernetesVersion: a.KubernetesVersion, FlannelWindowsImage: a.FlannelWindowsImage, KubeProxyWindowsImage: a.KubeProxyWindowsImage},
		v: v, cni: c, windows: true}
	var objs []runtime.Object
	if a.CNIDaemonSet {
		objs = append(objs, b.windowsCNI()...)
	}
	if a.KubeProxy {
		objs = append(objs, b.kubeProxyWindows())
	}
	return objs, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(version unknown)"
	}
	return s
}
