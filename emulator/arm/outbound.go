package arm

import (
	"fmt"
	"net/http"
	"strings"
)

// Outbound connectivity: how, if at all, a VM or scale-set instance reaches
// the internet, worked out from the resources as they stand when asked (a
// NAT gateway attached after boot counts at once, as on Azure, where it
// takes the subnet's new connections).
//
// What the emulator follows, from Microsoft Learn:
//   - virtual-network/ip-services/default-outbound-access: a VM has explicit
//     outbound connectivity through a NAT gateway on its subnet, a public IP
//     on its NIC, or a Standard load balancer's outbound rules (or the
//     implicit SNAT of a public load balancer's rules). The implicit "default
//     outbound access" IP is being retired: subnets created with API
//     2025-07-01 or later are private (defaultOutboundAccess false), and a VM
//     in a private subnet without an explicit method reaches nothing public.
//     The emulator's networks are all new, so a subnet is private unless its
//     body sets defaultOutboundAccess to true; even then instances of a
//     Flexible scale set get no default outbound IP.
//   - virtual-network/nat-gateway/nat-overview: a NAT gateway on the subnet
//     takes precedence over every other method (load balancer, instance
//     public IP) for new connections, and carries TCP and UDP only.
//   - load-balancer/outbound-rules: outbound rules apply only to backend VMs
//     without an instance-level public IP, and each names the protocol it
//     translates (Tcp, Udp or All).
//   - load-balancer/load-balancer-outbound-connections: a VM in the backend
//     pool of a public load balancer without outbound rules goes out through
//     the frontend of its load-balancing rules (unless a rule turns that off
//     with disableOutboundSnat), for the rule's protocol; an internal load
//     balancer gives no outbound path; secondary IP configurations get no
//     outbound through a load balancer, so only a machine's primary IP
//     configuration is considered.

// The ways out, in Azure's order of precedence.
const (
	ViaNATGateway        = "NATGateway"
	ViaPublicIP          = "PublicIP"
	ViaOutboundRule      = "OutboundRule"
	ViaLoadBalancingRule = "LoadBalancingRule"
	ViaDefaultOutbound   = "DefaultOutboundAccess"
)

// Egress is a machine's way to the internet for one protocol.
type Egress struct {
	// Via is one of the Via constants; "" when the machine has no way out.
	Via string
	// ID is the ARM ID of what carries the traffic: the NAT gateway, the
	// public IP address, the load balancer's outbound or load-balancing
	// rule, or the subnet for default outbound access.
	ID string
}

// None says whether the machine has no outbound path.
func (e Egress) None() bool { return e.Via == "" }

func (e Egress) String() string {
	if e.None() {
		return "no outbound connectivity"
	}
	return e.Via + " " + e.ID
}

// Outbound is the outbound path, for protocol Tcp or Udp, of the VM or
// scale-set instance with ARM ID id, as the emulator's resources stand now.
func (s *Server) Outbound(id, protocol string) (Egress, error) {
	proto := ""
	for _, p := range []string{"Tcp", "Udp"} {
		if strings.EqualFold(p, protocol) {
			proto = p
		}
	}
	if proto == "" {
		return Egress{}, fmt.Errorf("arm: outbound connectivity is modelled for Tcp and Udp, not %q", protocol)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.lookup(id)
	if r == nil || r.deleting || (r.kind.typ != kindVM && r.kind.typ != kindInstance) {
		return Egress{}, errorf(http.StatusNotFound, "ResourceNotFound", "The virtual machine %s was not found.", id)
	}
	return s.outbound(r, proto), nil
}

// outbound works out a machine's path; the caller holds s.mu.
func (s *Server) outbound(r *resource, proto string) Egress {
	ipc := s.primaryIPConfig(r)
	if ipc == nil {
		return Egress{}
	}
	p := obj(ipc, "properties")
	subnet := s.live(refID(p, "subnet"))
	if subnet != nil {
		if nat := s.live(refID(subnet.props(), "natGateway")); nat != nil {
			return Egress{Via: ViaNATGateway, ID: nat.idStr}
		}
	}
	if pip := s.live(refID(p, "publicIPAddress")); pip != nil {
		return Egress{Via: ViaPublicIP, ID: pip.idStr}
	}
	var pools []string
	for _, ref := range list(p, "loadBalancerBackendAddressPools") {
		if m, ok := ref.(map[string]any); ok {
			pools = append(pools, str(m, "id"))
		}
	}
	if e := s.lbOutbound(pools, proto, "outboundRules"); !e.None() {
		return e
	}
	if e := s.lbOutbound(pools, proto, "loadBalancingRules"); !e.None() {
		return e
	}
	if subnet != nil && get(subnet.props(), "defaultOutboundAccess") == true && !s.inFlexibleScaleSet(r) {
		return Egress{Via: ViaDefaultOutbound, ID: subnet.idStr}
	}
	return Egress{}
}

// live is the resource with the ID, unless it is missing or being deleted.
func (s *Server) live(id string) *resource {
	if id == "" {
		return nil
	}
	if r := s.lookup(id); r != nil && !r.deleting {
		return r
	}
	return nil
}

// primaryIPConfig is the primary IP configuration of the machine's primary
// NIC. A VM lists its NICs (one marked primary when there are several); a
// scale-set instance's NICs are made from the scale set's NIC
// configurations, which say which is primary.
func (s *Server) primaryIPConfig(r *resource) map[string]any {
	var nics []*resource
	primary := -1
	for _, n := range list(r.props(), "networkProfile", "networkInterfaces") {
		m, _ := n.(map[string]any)
		nic := s.live(str(m, "id"))
		if nic == nil {
			continue
		}
		if get(m, "properties", "primary") == true || s.instanceNICPrimary(r, nic) {
			primary = len(nics)
		}
		nics = append(nics, nic)
	}
	if len(nics) == 0 {
		return nil
	}
	if primary < 0 {
		primary = 0
	}
	return primaryOf(list(nics[primary].props(), "ipConfigurations"))
}

// instanceNICPrimary says whether an instance's NIC was made from the scale
// set's primary NIC configuration.
func (s *Server) instanceNICPrimary(inst, nic *resource) bool {
	if inst.kind.typ != kindInstance {
		return false
	}
	parent, _ := inst.id.Parent()
	vmss := s.lookup(parent.String())
	if vmss == nil {
		return false
	}
	for _, nc := range list(vmss.props(), "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations") {
		m, _ := nc.(map[string]any)
		if strings.EqualFold(str(m, "name"), nic.id.Name()) {
			return get(m, "properties", "primary") == true
		}
	}
	return false
}

// inFlexibleScaleSet says whether the machine is an instance of a scale
// set in Flexible orchestration mode, which never has default outbound
// access (default-outbound-access).
func (s *Server) inFlexibleScaleSet(r *resource) bool {
	if r.kind.typ != kindInstance {
		return false
	}
	parent, _ := r.id.Parent()
	vmss := s.lookup(parent.String())
	return vmss != nil && strings.EqualFold(str(vmss.props(), "orchestrationMode"), "Flexible")
}

// lbOutbound is the first of the load balancers' outbound rules (prop
// "outboundRules") or load-balancing rules ("loadBalancingRules") that
// translates proto for one of the backend pools.
func (s *Server) lbOutbound(pools []string, proto, prop string) Egress {
	for _, pool := range pools {
		i := strings.Index(strings.ToLower(pool), "/backendaddresspools/")
		if i < 0 {
			continue
		}
		lb := s.live(pool[:i])
		if lb == nil || lb.kind.typ != kindLB || lb.provisioningState() == "Failed" {
			continue
		}
		for _, it := range list(lb.props(), prop) {
			m, _ := it.(map[string]any)
			rp := obj(m, "properties")
			if !strings.EqualFold(refID(rp, "backendAddressPool"), pool) {
				continue
			}
			if rule := str(rp, "protocol"); !strings.EqualFold(rule, "All") && !strings.EqualFold(rule, proto) {
				continue
			}
			if prop == "loadBalancingRules" && (get(rp, "disableOutboundSnat") == true || !s.publicFrontend(lb, refID(rp, "frontendIPConfiguration"))) {
				continue
			}
			return Egress{Via: map[string]string{"outboundRules": ViaOutboundRule, "loadBalancingRules": ViaLoadBalancingRule}[prop], ID: lb.idStr + "/" + prop + "/" + str(m, "name")}
		}
	}
	return Egress{}
}

// publicFrontend says whether a load balancer's frontend has a public IP:
// an internal frontend translates nothing to the internet.
func (s *Server) publicFrontend(lb *resource, feID string) bool {
	for _, fe := range list(lb.props(), "frontendIPConfigurations") {
		m, _ := fe.(map[string]any)
		if strings.EqualFold(str(m, "id"), feID) {
			return s.live(refID(m, "properties", "publicIPAddress")) != nil
		}
	}
	return false
}
