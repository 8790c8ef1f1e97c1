package flavors

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The add-ons rendered for a cluster no flavor made are the flavors' own,
// at that cluster's versions; what the flavors cannot render honestly is
// refused with what to do instead.
func TestWindowsAddonObjectsFollowTheCluster(t *testing.T) {
	objs, err := WindowsAddonObjects(WindowsAddons{CNI: "calico", KubernetesVersion: "v1.35.1", CalicoVersion: calicoVersion, KubeProxy: true, CNIDaemonSet: true})
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			images[ds.Name] = ds.Spec.Template.Spec.Containers[0].Image
		}
	}
	if images["kube-proxy-windows"] != kubeProxyImage+":v1.35.1-calico-hostprocess" || images["calico-node-windows"] != calicoNodeWin+":"+calicoVersion {
		t.Errorf("DaemonSets' images %v", images)
	}
	if _, err := WindowsAddonObjects(WindowsAddons{CNI: "calico", KubernetesVersion: "v1.35.1", CalicoVersion: "v3.29.1", CNIDaemonSet: true}); err == nil || !strings.Contains(err.Error(), "runs Calico v3.29.1") {
		t.Errorf("calico-node-windows for another Calico release: %v, want it refused", err)
	}
	if _, err := WindowsAddonObjects(WindowsAddons{CNI: "flannel", KubernetesVersion: "v1.35.1", KubeProxy: true, CNIDaemonSet: true}); err == nil ||
		!strings.Contains(err.Error(), "--flannel-windows-image") || !strings.Contains(err.Error(), "--kube-proxy-windows-image") {
		t.Errorf("flannel without the user's images: %v, want both flags named", err)
	}
	objs, err = WindowsAddonObjects(WindowsAddons{CNI: "flannel", KubernetesVersion: "v1.35.1", PodCIDR: "10.200.0.0/16", CNIDaemonSet: true, FlannelWindowsImage: "example.com/flannel:v0.25.6-hostprocess"})
	if err != nil || len(objs) != 2 || !strings.Contains(string(mustYAML(objs[0])), "10.200.0.0/16") {
		t.Errorf("flannel's Windows objects for the cluster's network: %v %v", objs, err)
	}
}
