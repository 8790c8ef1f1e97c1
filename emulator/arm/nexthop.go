package arm

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Next hop types of a route, as the network API names them.
const (
	HopVnetLocal        = "VnetLocal"
	HopVirtualAppliance = "VirtualAppliance"
	HopInternet         = "Internet"
	HopNone             = "None"
)

// Hop is the route Azure's SDN picks for a packet leaving a NIC.
type Hop struct {
	// Type is the route's next hop type (HopVnetLocal, ...).
	Type string
	// IP is a VirtualAppliance route's nextHopIpAddress.
	IP string
	// Prefix is the route's address prefix.
	Prefix netip.Prefix
	// Route is the user-defined route's ID; "" for a system route.
	Route string
	// Subnet is the ID of the subnet the packet leaves, RouteTable the
	// ID of the route table attached to it ("" for none).
	Subnet, RouteTable string
	// ApplianceNIC is the NIC of the VNet holding a VirtualAppliance
	// route's next hop address ("" for none), and Forwards its
	// enableIPForwarding: without it Azure drops a packet the NIC gets
	// for an address other than its own (the same document, "Virtual
	// appliance").
	ApplianceNIC string
	Forwards     bool
}

func (h Hop) String() string {
	src := "system route"
	if h.Route != "" {
		src = "route " + h.Route
	}
	if h.Type == HopVirtualAppliance {
		return fmt.Sprintf("%s %s -> %s %s", src, h.Prefix, h.Type, h.IP)
	}
	return fmt.Sprintf("%s %s -> %s", src, h.Prefix, h.Type)
}

// NextHop is the route Azure picks for a packet to dest leaving the
// primary IP configuration of a VM's, scale-set instance's or NIC's (id)
// primary NIC, from its subnet's routes as the emulator's resources stand
// now: the system routes of every subnet (each address range of the VNet
// to VnetLocal, 0.0.0.0/0 to the Internet, and the RFC 1918 and RFC 6598
// ranges to None unless the VNet's address space holds them) combined with
// the user-defined routes of the route table attached to the subnet; the
// longest prefix wins, and a user-defined route wins over a system route
// of the same prefix (MicrosoftDocs/azure-docs
// articles/virtual-network/virtual-networks-udr-overview.md at
// 0239a4e29c2871ead0a0ece8e4c10051761f0bd8, "System routes", "User-defined"
// and "How Azure selects a route"). VNet peering, gateway and service
// endpoint routes are not modelled.
func (s *Server) NextHop(id string, dest netip.Addr) (Hop, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.live(id)
	var ipc map[string]any
	switch {
	case r == nil:
	case r.kind.typ == kindVM || r.kind.typ == kindInstance:
		ipc = s.primaryIPConfig(r)
	case r.kind.typ == kindNIC || r.kind.typ == kindInstanceNIC:
		ipc = primaryOf(list(r.props(), "ipConfigurations"))
	}
	if r == nil || ipc == nil {
		return Hop{}, errorf(http.StatusNotFound, "ResourceNotFound", "No network interface of %s was found.", id)
	}
	subnet := s.live(refID(obj(ipc, "properties"), "subnet"))
	if subnet == nil {
		return Hop{}, errorf(http.StatusNotFound, "ResourceNotFound", "The subnet of %s was not found.", id)
	}
	var best Hop
	better := func(h Hop) {
		if !h.Prefix.Contains(dest) {
			return
		}
		if best.Type == "" || h.Prefix.Bits() > best.Prefix.Bits() || h.Prefix.Bits() == best.Prefix.Bits() && h.Route != "" && best.Route == "" {
			best = h
		}
	}
	var space []netip.Prefix
	if parent, ok := subnet.id.Parent(); ok {
		if vnet := s.live(parent.String()); vnet != nil {
			for _, p := range list(vnet.props(), "addressSpace", "addressPrefixes") {
				if ps, ok := p.(string); ok {
					if pfx, err := netip.ParsePrefix(ps); err == nil {
						space = append(space, pfx)
					}
				}
			}
		}
	}
	for _, p := range space {
		better(Hop{Type: HopVnetLocal, Prefix: p})
	}
	better(Hop{Type: HopInternet, Prefix: netip.MustParsePrefix("0.0.0.0/0")})
	for _, reserved := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} {
		rp := netip.MustParsePrefix(reserved)
		held := false
		for _, p := range space {
			held = held || p.Bits() <= rp.Bits() && p.Contains(rp.Addr())
		}
		if !held {
			better(Hop{Type: HopNone, Prefix: rp})
		}
	}
	table := s.live(refID(subnet.props(), "routeTable"))
	if rt := table; rt != nil {
		for _, route := range s.children(rt.id, "routes") {
			if route.deleting {
				continue
			}
			p := route.props()
			pfx, err := netip.ParsePrefix(str(p, "addressPrefix"))
			if err != nil {
				continue // a service tag: not modelled
			}
			better(Hop{Type: canonicalHop(str(p, "nextHopType")), IP: str(p, "nextHopIpAddress"), Prefix: pfx, Route: route.idStr})
		}
	}
	best.Subnet = subnet.idStr
	if table != nil {
		best.RouteTable = table.idStr
	}
	if best.Type == HopVirtualAppliance {
		vnet := ""
		if parent, ok := subnet.id.Parent(); ok {
			vnet = strings.ToLower(parent.String()) + "/subnets/"
		}
		for _, nic := range s.nicsUsing(func(ipc map[string]any) bool {
			return str(ipc, "properties", "privateIPAddress") == best.IP && strings.HasPrefix(strings.ToLower(refID(ipc, "properties", "subnet")), vnet)
		}) {
			if !nic.deleting {
				best.ApplianceNIC, best.Forwards = nic.idStr, get(nic.props(), "enableIPForwarding") == true
			}
		}
	}
	return best, nil
}

// canonicalHop spells a next hop type as the API does, whatever the case
// it was written in.
func canonicalHop(t string) string {
	for _, c := range []string{HopVnetLocal, HopVirtualAppliance, HopInternet, HopNone, "VirtualNetworkGateway"} {
		if strings.EqualFold(c, t) {
			return c
		}
	}
	return t
}

// primaryOf is the IP configuration marked primary, else the first.
func primaryOf(confs []any) map[string]any {
	for _, c := range confs {
		if m, ok := c.(map[string]any); ok && get(m, "properties", "primary") == true {
			return m
		}
	}
	if len(confs) > 0 {
		m, _ := confs[0].(map[string]any)
		return m
	}
	return nil
}
