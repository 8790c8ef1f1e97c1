package machines

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
)

// flannelNetConfDir is where flanneld reads net-conf.json, mounted from
// its ConfigMap (flannel-io/flannel Documentation/kube-flannel.yml; the
// component catalog's kube-flannel needs).
const flannelNetConfDir = "/etc/kube-flannel"

// learnPodBackend records the backend of the network configuration the
// node's flanneld reads once, as it starts (net-conf.json's Backend.Type;
// flannel-io/flannel pkg/subnet/kube/kube.go at
// 8f9ffd2482d8509bb19944af6fcfed36b6ca9b23, NewSubnetManager): with
// host-gw, flanneld routes each other node's pod subnet through that
// node's address, unencapsulated (flannel-io/flannel
// pkg/backend/hostgw/hostgw.go at 9428fb888ee31c36c5c509bcb8029f82b518f6a1,
// a route per lease with the lease's public IP as gateway), so the VNet
// carries packets addressed to pods. A configuration it cannot read
// leaves the node as it was: the component check refuses such a pod
// before it runs.
func (r *Runtime) learnPodBackend(ctx context.Context, admin kubernetes.Interface, m *machine, pod *corev1.Pod, c corev1.Container) {
	volume := ""
	for _, vm := range c.VolumeMounts {
		if path.Clean(vm.MountPath) == flannelNetConfDir {
			volume = vm.Name
		}
	}
	cm := ""
	for _, v := range pod.Spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			cm = v.ConfigMap.Name
		}
	}
	if cm == "" {
		return
	}
	obj, err := admin.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, cm, metav1.GetOptions{})
	if err != nil {
		return
	}
	var conf struct {
		Backend struct{ Type string }
	}
	if err := json.Unmarshal([]byte(obj.Data["net-conf.json"]), &conf); err != nil {
		return
	}
	backend := strings.ToLower(conf.Backend.Type)
	r.mu.Lock()
	m.podBackend = backend
	r.mu.Unlock()
	m.logs.Write(vmdisk.Containerd, "%s/%s %s: backend %s for the pod network", pod.Namespace, pod.Name, c.Name, backend)
}

// routesNatively says whether the node sends packets for other nodes'
// pods unencapsulated into the VNet: flannel's host-gw on Linux, an
// L2Bridge HNS network on Windows (flannel's host-gw, Calico's BGP mode).
// VXLAN (flannel's, Calico's) wraps them in packets between the nodes'
// own addresses, which the VNet carries without a route.
func (r *Runtime) routesNatively(m *machine) bool {
	r.mu.Lock()
	backend := m.podBackend
	r.mu.Unlock()
	if backend == "host-gw" {
		return true
	}
	return m.windows() && strings.EqualFold(machineHNS{r, m}.networkType(), "L2Bridge")
}

// underlayRoute says whether the VNet delivers a packet that machine m
// sends unencapsulated to pod IP ip of owner: Azure's SDN forwards it only
// by the routes of the subnet m's NIC is in, which must send the pod's
// address to owner's address (a route table attached to the subnet, with
// the route the cloud provider or the user wrote), and hands it to
// owner's NIC only if that NIC forwards (enableIPForwarding); the system
// routes know no pod CIDR and drop it (None) or send it elsewhere.
func (r *Runtime) underlayRoute(m, owner *machine, ip netip.Addr) error {
	if !r.routesNatively(m) || m.arm.NextHop == nil || len(owner.arm.PrivateIPs) == 0 {
		return nil
	}
	hop, err := m.arm.NextHop(ip)
	if err != nil {
		return fmt.Errorf("no route to host: %w", err)
	}
	want := owner.arm.PrivateIPs[0]
	if hop.Type == arm.HopVirtualAppliance && hop.IP == want {
		if !hop.Forwards {
			return fmt.Errorf("no route to host: node %s's NIC %s (%s) does not have IP forwarding enabled: Azure drops the packets for its pod %s, which are not addressed to the NIC", owner.nodeName, path.Base(hop.ApplianceNIC), want, ip)
		}
		return nil
	}
	subnet := path.Base(hop.Subnet)
	if hop.RouteTable == "" {
		return fmt.Errorf("no route to host: node %s sends pod traffic unencapsulated and its subnet %s has no route table: Azure routes %s of node %s by its %s, not to %s", m.nodeName, subnet, ip, owner.nodeName, hop, want)
	}
	return fmt.Errorf("no route to host: route table %s of node %s's subnet %s has no route sending %s (a pod of node %s) to %s: Azure routes it by its %s", path.Base(hop.RouteTable), m.nodeName, subnet, ip, owner.nodeName, want, hop)
}
