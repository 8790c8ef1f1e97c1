package kubelet

import (
	"context"
	"net/netip"
	"sort"
	"strings"

	"github.com/winkube/winkube/emulator/machines/vmdisk"
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

// CreateHNSNetwork is a Windows CNI creating its HNS network over the
// node's pod CIDR.
func (k *Kubelet) CreateHNSNetwork(ctx context.Context, name, typ string) {
	k.mu.Lock()
	if k.hnsNetworks == nil {
		k.hnsNetworks = map[string]string{}
	}
	_, had := k.hnsNetworks[name]
	k.hnsNetworks[name] = typ
	k.mu.Unlock()
	if had {
		return
	}
	k.ipam.mu.Lock()
	err := k.loadCIDR(ctx)
	cidr := k.ipam.cidr
	k.ipam.mu.Unlock()
	if err != nil {
		k.cfg.Logs.Write(vmdisk.CNI, "HNS network %s (%s): %v", name, typ, err)
		return
	}
	k.cfg.Logs.Write(vmdisk.CNI, "HNS network %s (%s) over pod CIDR %s", name, typ, cidr)
}

// HNSNetwork says whether the HNS network exists, and its type.
func (k *Kubelet) HNSNetwork(name string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	typ, ok := k.hnsNetworks[name]
	return typ, ok
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
	var names []string
	types := map[string]string{}
	for n, t := range k.hnsNetworks {
		names = append(names, n)
		types[n] = t
	}
	k.mu.Unlock()
	cidr := k.ipam.prefix()
	if len(names) == 0 || !cidr.IsValid() {
		return nil, nil
	}
	sort.Strings(names)
	var nets []HNSNetwork
	for _, n := range names {
		nets = append(nets, HNSNetwork{Name: n, Type: types[n], AddressPrefix: cidr.String(), ManagementIP: k.cfg.Address.String()})
	}
	name := names[0]
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
