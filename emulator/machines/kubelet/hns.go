package kubelet

import (
	"context"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HNSNetwork is a Windows node's pod network as the Host Networking
// Service lists it.
type HNSNetwork struct {
	Name          string
	Type          string // Overlay (VXLAN) or L2Bridge (host-gw)
	AddressPrefix string
	ManagementIP  string
}

// HNSEndpoint is one pod's endpoint on that network.
type HNSEndpoint struct {
	Name             string
	Pod              string
	IPAddress        string
	VirtualNetwork   string
	IsRemoteEndpoint bool
	State            string
}

// kubeNetwork is the HNS network a Windows CNI pod names in its
// KUBE_NETWORK setting ("Calico.*", "flannel.4096", "cbr0"), from its env
// or, as the kubelet resolves envFrom, from the ConfigMaps it names.
func (k *Kubelet) kubeNetwork(ctx context.Context, pod *corev1.Pod) string {
	for _, c := range allContainers(pod) {
		for _, e := range c.Env {
			if e.Name == "KUBE_NETWORK" && e.Value != "" {
				return e.Value
			}
		}
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef == nil {
				continue
			}
			key, ok := strings.CutPrefix("KUBE_NETWORK", from.Prefix)
			if !ok {
				continue
			}
			cm, err := k.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err == nil && cm.Data[key] != "" {
				return cm.Data[key]
			}
		}
	}
	return ""
}

// HNS is what Get-HnsNetwork and Get-HnsEndpoint show on this node: the
// network the running CNI created over the node's pod CIDR, with one
// endpoint per pod address. A Linux node, or a Windows node whose CNI has
// not run yet, has none.
func (k *Kubelet) HNS() ([]HNSNetwork, []HNSEndpoint) {
	if k.cfg.Host.OS != "windows" {
		return nil, nil
	}
	k.mu.Lock()
	name := k.hnsNetwork
	k.mu.Unlock()
	cidr := k.ipam.prefix()
	if name == "" || !cidr.IsValid() {
		return nil, nil
	}
	name = strings.TrimSuffix(name, ".*")
	typ := "Overlay"
	if name == "cbr0" {
		typ = "L2Bridge"
	}
	nets := []HNSNetwork{{Name: name, Type: typ, AddressPrefix: cidr.String(), ManagementIP: k.cfg.Address.String()}}
	k.ipam.mu.Lock()
	defer k.ipam.mu.Unlock()
	var eps []HNSEndpoint
	for uid, a := range k.ipam.byUID {
		eps = append(eps, HNSEndpoint{Name: "ep-" + strings.SplitN(uid, "-", 2)[0], Pod: k.ipam.pods[uid], IPAddress: a.String(), VirtualNetwork: name, State: "Attached"})
	}
	sort.Slice(eps, func(i, j int) bool {
		a, _ := netip.ParseAddr(eps[i].IPAddress)
		b, _ := netip.ParseAddr(eps[j].IPAddress)
		return a.Less(b)
	})
	return nets, eps
}
