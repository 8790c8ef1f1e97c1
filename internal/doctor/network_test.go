package doctor

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func calicoObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
	return u
}

func TestCNIVXLANFlannel(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "kube-flannel")
	c.linuxNode("lin-1")
	expect(t, "no Windows nodes", CNIVXLAN(c.state()), 0, Warning)
	c.windowsNode("win-1")
	expect(t, "no CNI", CNIVXLAN(c.state()), 1, Warning, "no flannel or Calico configuration")

	// flannel's upstream manifest: VXLAN with its defaults (VNI 1, port 8472).
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-flannel-cfg"},
		Data: map[string]string{"net-conf.json": `{"Network": "10.244.0.0/16", "EnableNFTables": false, "Backend": {"Type": "vxlan"}}`}}
	c.create(cfg, nil)
	fs := CNIVXLAN(c.state())
	expect(t, "upstream defaults", fs, 2, Error)
	expect(t, "VNI", fs[:1], 1, Error, "VNI is 1", "4096", "Backend.VNI")
	expect(t, "port", fs[1:], 1, Error, "port is 8472", "4789")

	c.update(cfg, func() {
		cfg.Data["net-conf.json"] = `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789}}`
	})
	expect(t, "Windows numbers", CNIVXLAN(c.state()), 0, Warning)
}

func TestCNIVXLANCalico(t *testing.T) {
	c := newCluster(t)
	c.windowsNode("win-1")
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "calico-config"},
		Data: map[string]string{"veth_mtu": "1350", "calico_backend": "vxlan"}}
	c.create(cfg, nil)
	pool := calicoObject("IPPool", "default-ipv4-ippool", map[string]any{"cidr": "192.168.0.0/16", "vxlanMode": "Always", "ipipMode": "Never"})
	c.create(pool, nil)
	felix := calicoObject("FelixConfiguration", "default", map[string]any{"vxlanVNI": int64(4096), "vxlanPort": int64(4789)})
	c.create(felix, nil)
	node := daemonSet("kube-system", "calico-node", corev1.PodSpec{Containers: []corev1.Container{{Name: "calico-node", Image: "docker.io/calico/node:v3.28.2",
		Env: []corev1.EnvVar{{Name: "FELIX_VXLANMTU", Value: "1350"}}}}})
	c.create(node, nil)
	expect(t, "Windows numbers", CNIVXLAN(c.state()), 0, Warning)

	// Calico's upstream defaults: veth_mtu 1440 (too big for Azure), IP-in-IP.
	c.update(cfg, func() { cfg.Data["veth_mtu"] = "1440" })
	pool.Object["spec"] = map[string]any{"cidr": "192.168.0.0/16", "vxlanMode": "Never", "ipipMode": "Always"}
	c.update(pool, func() {})
	felix.Object["spec"] = map[string]any{"vxlanVNI": int64(4097)}
	c.update(felix, func() {})
	c.update(node, func() { node.Spec.Template.Spec.Containers[0].Env[0].Value = "1450" })
	fs := CNIVXLAN(c.state())
	expect(t, "all wrong", fs, 4, Error)
	expect(t, "veth_mtu", fs[:1], 1, Error, "MTU is 1440", "calico-config veth_mtu", "1350")
	expect(t, "vxlanVNI", fs[1:2], 1, Error, "VNI is 4097", "FelixConfiguration/default spec.vxlanVNI")
	expect(t, "FELIX_VXLANMTU", fs[2:3], 1, Error, "MTU is 1450", "FELIX_VXLANMTU")
	expect(t, "IPPool", fs[3:], 1, Error, "IPPool default-ipv4-ippool", "vxlanMode: Always")
}
