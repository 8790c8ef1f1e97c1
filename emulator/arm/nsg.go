package arm

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Network security groups as the data plane applies them to load-balanced
// traffic.
//
// Azure filters a flow through the NSG of the backend's subnet and then
// through the NSG of its NIC; it is let in only when both let it in, and a
// level with no NSG lets everything through ("Network security groups:
// How network security groups filter network traffic", learn.microsoft.com,
// articles/virtual-network/network-security-group-how-it-works.md). In each
// NSG the inbound rules are read in priority order, lowest number first; the
// first rule the flow matches decides, and after the custom rules come the
// default ones (nsgDefaultRules).
//
// The destination the NSG sees is the load balancer's decision: with
// floating IP disabled "Azure exposes the VM instances' IP address", with
// it enabled "Azure changes the IP address mapping to the Frontend IP
// address of the Load Balancer" (articles/load-balancer/
// load-balancer-floating-ip.md, MicrosoftDocs/azure-docs 05f0e716): the
// backend's private address, or the frontend's, on the backend port.
//
// Not carried: source ports (every rule is taken to match any), rules
// naming application security groups (they match nothing here), service
// tags other than Internet, VirtualNetwork and AzureLoadBalancer (they match
// nothing). A Standard load balancer's backend with no NSG at either level
// takes no flow (Inbound.Closed); a Basic one's takes every flow.

// AzureLoadBalancerIP is the address Azure's health probes come from, the
// AzureLoadBalancer service tag ("the probe source for the load balancer
// health probe": virtual-network/what-is-ip-address-168-63-129-16.md).
var AzureLoadBalancerIP = netip.MustParseAddr("168.63.129.16")

// SecurityRule is one inbound rule as the data plane matches flows with
// it. Addresses are CIDRs, single addresses, "*" or service tags; ports
// are "*", "80" or "8000-8999"; Protocol is Tcp, Udp, Icmp, Esp, Ah or *.
type SecurityRule struct {
	Name         string
	Priority     int
	Allow        bool
	Protocol     string
	Sources      []string
	Destinations []string
	Ports        []string
}

// SecurityGroup is an NSG's inbound rules in the order Azure reads them:
// its own by priority, then the default ones.
type SecurityGroup struct {
	ID    string
	Rules []SecurityRule
}

// Inbound is what stands between a load-balancing rule and one backend:
// the NSGs of its subnet and of its NIC, and what the flow looks like when
// it reaches them.
type Inbound struct {
	// Groups are the NSGs a flow must pass, the subnet's first, then the
	// NIC's; none lets every flow in.
	Groups []SecurityGroup
	// Destination is the address the NSGs see: the backend's private
	// address, or with floating IP the frontend's.
	Destination netip.Addr
	// Protocol is the rule's: Tcp, Udp or All.
	Protocol string
	// VirtualNetwork is the address space of the backend's virtual
	// network, what the VirtualNetwork service tag stands for.
	VirtualNetwork []netip.Prefix
	// Closed is a Standard load balancer's backend with no NSG on its
	// subnet or NIC: "closed to inbound connections unless opened by
	// Network Security Groups ... If you don't have an NSG on a subnet or
	// NIC of your virtual machine resource, traffic isn't allowed to reach
	// this resource" (load-balancer/load-balancer-overview.md). Its health
	// probes, from the platform's address, still reach it.
	Closed bool
}

// Admits says whether the NSGs let a flow from src to the backend's port
// in. A nil Inbound admits everything.
func (in *Inbound) Admits(src netip.Addr, port int) bool {
	if in == nil {
		return true
	}
	if in.Closed && len(in.Groups) == 0 && src != AzureLoadBalancerIP {
		return false
	}
	for _, g := range in.Groups {
		if !in.groupAdmits(g, src, port) {
			return false
		}
	}
	return true
}

func (in *Inbound) groupAdmits(g SecurityGroup, src netip.Addr, port int) bool {
	for _, r := range g.Rules {
		if in.matches(r, src, port) {
			return r.Allow
		}
	}
	return false // the default rules end with DenyAllInBound
}

func (in *Inbound) matches(r SecurityRule, src netip.Addr, port int) bool {
	if !protocolMatches(r.Protocol, in.Protocol) {
		return false
	}
	return anyMatch(r.Ports, func(p string) bool { return portMatches(p, port) }) &&
		anyMatch(r.Sources, func(p string) bool { return in.addressMatches(p, src) }) &&
		anyMatch(r.Destinations, func(p string) bool { return in.addressMatches(p, in.Destination) })
}

func anyMatch(items []string, f func(string) bool) bool {
	for _, it := range items {
		if f(it) {
			return true
		}
	}
	return false
}

// protocolMatches: a rule of * takes every flow; a flow of a rule for All
// protocols carries TCP and UDP, and a TCP-only NSG rule still takes its
// TCP connections (the local data plane carries TCP only).
func protocolMatches(rule, flow string) bool {
	switch {
	case rule == "*" || strings.EqualFold(rule, flow):
		return true
	case strings.EqualFold(flow, "All"):
		return strings.EqualFold(rule, "Tcp") || strings.EqualFold(rule, "Udp")
	}
	return false
}

func portMatches(r string, port int) bool {
	r = strings.TrimSpace(r)
	if r == "*" {
		return true
	}
	lo, hi, ok := strings.Cut(r, "-")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	return err1 == nil && err2 == nil && a <= port && port <= b
}

// addressMatches matches an address against a prefix of a rule: "*", a
// CIDR, an address, or one of the service tags the local world knows.
func (in *Inbound) addressMatches(p string, a netip.Addr) bool {
	p = strings.TrimSpace(p)
	inVNet := func() bool {
		for _, v := range in.VirtualNetwork {
			if v.Contains(a) {
				return true
			}
		}
		return false
	}
	switch {
	case p == "*" || strings.EqualFold(p, "Any"):
		return true
	case strings.EqualFold(p, "VirtualNetwork"):
		return inVNet()
	case strings.EqualFold(p, "AzureLoadBalancer"):
		return a == AzureLoadBalancerIP
	case strings.EqualFold(p, "Internet"):
		// "The IP address space that's outside the virtual network and
		// reachable by the public internet" (virtual-network/
		// service-tags-overview.md).
		return a.IsValid() && !inVNet() && a != AzureLoadBalancerIP
	}
	if pfx, err := netip.ParsePrefix(p); err == nil {
		return pfx.Contains(a)
	}
	if ip, err := netip.ParseAddr(p); err == nil {
		return ip == a
	}
	return false // another service tag, which the local world does not populate
}

// strings of a rule's singular and plural property (sourceAddressPrefix
// and sourceAddressPrefixes).
func oneAndMany(p map[string]any, one, many string) []string {
	var out []string
	if v := str(p, one); v != "" {
		out = append(out, v)
	}
	for _, it := range list(p, many) {
		if v, ok := it.(string); ok && v != "" {
			out = append(out, v)
		}
	}
	return out
}

// securityGroup reads an NSG's inbound rules, its own by priority then the
// default ones; nil when it does not exist.
func (s *Server) securityGroup(id string) *SecurityGroup {
	nsg := s.lookup(id)
	if nsg == nil || nsg.kind.typ != kindNSG {
		return nil
	}
	g := &SecurityGroup{ID: nsg.idStr}
	read := func(name string, p map[string]any) {
		if !strings.EqualFold(str(p, "direction"), "Inbound") {
			return
		}
		prio, _, _ := number(p, "priority")
		g.Rules = append(g.Rules, SecurityRule{Name: name, Priority: prio, Allow: strings.EqualFold(str(p, "access"), "Allow"),
			Protocol:     str(p, "protocol"),
			Sources:      oneAndMany(p, "sourceAddressPrefix", "sourceAddressPrefixes"),
			Destinations: oneAndMany(p, "destinationAddressPrefix", "destinationAddressPrefixes"),
			Ports:        oneAndMany(p, "destinationPortRange", "destinationPortRanges")})
	}
	for _, r := range s.children(nsg.id, "securityRules") {
		if !r.deleting {
			read(r.id.Name(), r.props())
		}
	}
	sort.SliceStable(g.Rules, func(i, j int) bool { return g.Rules[i].Priority < g.Rules[j].Priority })
	for _, d := range nsgDefaultRules(nsg) {
		m := d.(map[string]any)
		read(str(m, "name"), obj(m, "properties"))
	}
	return g
}

// admission is, for each backend of a load-balancing rule, what its NSGs
// let in. pool is the rule's backend pool, rule has its frontend and
// backends filled in.
func (s *Server) admission(pool map[string]any, rule LBRule, standard bool) map[string]*Inbound {
	if len(rule.Backends) == 0 {
		return nil
	}
	// The virtual network of an IP-based pool's addresses: the pool's, or
	// each address's (its virtualNetwork or subnet).
	vnetOf := map[string]string{}
	poolVNet := refID(pool, "properties", "virtualNetwork")
	for _, a := range list(pool, "properties", "loadBalancerBackendAddresses") {
		am, _ := a.(map[string]any)
		ap := obj(am, "properties")
		v := poolVNet
		if r := refID(ap, "virtualNetwork"); r != "" {
			v = r
		} else if sn := refID(ap, "subnet"); sn != "" {
			if i := strings.Index(strings.ToLower(sn), "/subnets/"); i >= 0 {
				v = sn[:i]
			}
		}
		vnetOf[str(ap, "ipAddress")] = v
	}
	poolID := str(pool, "id")
	out := map[string]*Inbound{}
	for _, ip := range rule.Backends {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		in := &Inbound{Destination: addr, Protocol: rule.Protocol, Closed: standard}
		if rule.FloatingIP {
			if fe, err := netip.ParseAddr(rule.FrontendIP); err == nil {
				in.Destination = fe
			}
		}
		nic, subnet := s.backendPlace(ip, poolID, vnetOf[ip])
		if subnet != nil {
			if vnetID, ok := subnet.id.Parent(); ok {
				if vnet := s.lookup(vnetID.String()); vnet != nil {
					for _, p := range list(vnet.props(), "addressSpace", "addressPrefixes") {
						ps, _ := p.(string)
						if pfx, err := netip.ParsePrefix(ps); err == nil {
							in.VirtualNetwork = append(in.VirtualNetwork, pfx)
						}
					}
				}
			}
			if g := s.securityGroup(refID(subnet.props(), "networkSecurityGroup")); g != nil {
				in.Groups = append(in.Groups, *g)
			}
		}
		if nic != nil {
			if g := s.securityGroup(refID(nic.props(), "networkSecurityGroup")); g != nil {
				in.Groups = append(in.Groups, *g)
			}
		}
		out[ip] = in
	}
	return out
}

// backendPlace finds where a backend address lives: the NIC whose IP
// configuration has it (one in the pool first), and its subnet; for an
// IP-based pool's address without a NIC, the subnet of vnet holding it.
func (s *Server) backendPlace(ip, poolID, vnet string) (nic, subnet *resource) {
	var subnetID string
	inVNet := func(sn string) bool {
		return vnet == "" || strings.HasPrefix(strings.ToLower(sn), strings.ToLower(vnet)+"/subnets/")
	}
	for _, n := range s.nicsUsing(func(ipc map[string]any) bool {
		return str(ipc, "properties", "privateIPAddress") == ip && inVNet(refID(ipc, "properties", "subnet"))
	}) {
		if n.deleting {
			continue
		}
		for _, it := range list(n.props(), "ipConfigurations") {
			ipc, _ := it.(map[string]any)
			if str(ipc, "properties", "privateIPAddress") != ip {
				continue
			}
			member := false
			for _, ref := range list(ipc, "properties", "loadBalancerBackendAddressPools") {
				if rm, ok := ref.(map[string]any); ok && strings.EqualFold(str(rm, "id"), poolID) {
					member = true
				}
			}
			if nic == nil || member {
				nic, subnetID = n, refID(ipc, "properties", "subnet")
			}
		}
	}
	if subnetID != "" {
		return nic, s.lookup(subnetID)
	}
	if vnet == "" {
		return nic, nil
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nic, nil
	}
	id, ok := parseResourcePath(vnet)
	if !ok {
		return nic, nil
	}
	for _, sn := range s.children(id, "subnets") {
		ps, _ := prefixesOf(sn.props())
		for _, p := range ps {
			if p.Contains(addr) {
				return nic, sn
			}
		}
	}
	return nic, nil
}
