package arm

import (
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

const (
	kindVNet        = "Microsoft.Network/virtualNetworks"
	kindSubnet      = "Microsoft.Network/virtualNetworks/subnets"
	kindNSG         = "Microsoft.Network/networkSecurityGroups"
	kindRule        = "Microsoft.Network/networkSecurityGroups/securityRules"
	kindRouteTable  = "Microsoft.Network/routeTables"
	kindRoute       = "Microsoft.Network/routeTables/routes"
	kindNatGateway  = "Microsoft.Network/natGateways"
	kindPublicIP    = "Microsoft.Network/publicIPAddresses"
	kindLB          = "Microsoft.Network/loadBalancers"
	kindNatRule     = "Microsoft.Network/loadBalancers/inboundNatRules"
	kindNIC         = "Microsoft.Network/networkInterfaces"
	kindInstanceNIC = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces"
)

func init() {
	register(&kindInfo{typ: kindVNet, topLevel: true, embedded: map[string]string{"subnets": "subnets"}, put: putVNet, canDelete: deleteVNetCheck})
	register(&kindInfo{typ: kindSubnet, put: putSubnet, canDelete: subnetInUse})
	register(&kindInfo{typ: kindNSG, topLevel: true, embedded: map[string]string{"securityRules": "securityRules"}, put: putNSG, canDelete: referencedBySubnet("networkSecurityGroup")})
	register(&kindInfo{typ: kindRule, put: putRule})
	register(&kindInfo{typ: kindRouteTable, topLevel: true, embedded: map[string]string{"routes": "routes"}, put: putEmbeddedOnly("routes"), canDelete: referencedBySubnet("routeTable")})
	register(&kindInfo{typ: kindRoute, put: putRoute})
	register(&kindInfo{typ: kindNatGateway, topLevel: true, put: putNatGateway, canDelete: referencedBySubnet("natGateway")})
	register(&kindInfo{typ: kindPublicIP, topLevel: true, put: putPublicIP, canDelete: publicIPInUse})
	register(&kindInfo{typ: kindLB, topLevel: true, embedded: map[string]string{"inboundNatRules": "inboundNatRules"}, put: putLB, canDelete: lbInUse})
	register(&kindInfo{typ: kindNatRule, put: putNatRule, canDelete: natRuleInUse})
	register(&kindInfo{typ: kindNIC, topLevel: true, put: putNIC, canDelete: nicAttached})
	register(&kindInfo{typ: kindInstanceNIC, readOnly: true})
}

// prefixesOf reads addressPrefix / addressPrefixes of a subnet or route.
func prefixesOf(props map[string]any) ([]netip.Prefix, *armError) {
	var raw []string
	if p := str(props, "addressPrefix"); p != "" {
		raw = append(raw, p)
	}
	for _, p := range list(props, "addressPrefixes") {
		if ps, ok := p.(string); ok {
			raw = append(raw, ps)
		}
	}
	var out []netip.Prefix
	for _, p := range raw {
		pfx, err := netip.ParsePrefix(p)
		if err != nil || pfx.Masked() != pfx {
			return nil, errorf(http.StatusBadRequest, "InvalidAddressPrefixFormat", "Address prefix %s does not have a valid format.", p)
		}
		out = append(out, pfx)
	}
	return out, nil
}

func putVNet(s *Server, r, old *resource) *armError {
	var space []netip.Prefix
	for _, p := range list(r.props(), "addressSpace", "addressPrefixes") {
		ps, _ := p.(string)
		pfx, err := netip.ParsePrefix(ps)
		if err != nil || pfx.Masked() != pfx {
			return errorf(http.StatusBadRequest, "InvalidAddressPrefixFormat", "Address prefix %v does not have a valid format.", p)
		}
		space = append(space, pfx)
	}
	if len(space) == 0 {
		return errorf(http.StatusBadRequest, "InvalidAddressSpace", "Virtual network %s must have at least one address prefix in addressSpace.", r.id.Name())
	}
	if _, ok := r.props()["virtualNetworkPeerings"]; !ok {
		// Peerings are not emulated; GET shows that there are none.
		r.props()["virtualNetworkPeerings"] = []any{}
	}
	return s.putEmbedded(r, old, "subnets", "subnets")
}

// putEmbedded makes the parent's embedded children (a VNet's subnets) what
// the PUT says: as in ARM, children left out of the body are deleted.
func (s *Server) putEmbedded(r, old *resource, childType, prop string) *armError {
	items := list(r.props(), prop)
	delete(r.props(), prop)
	childKind := kinds[strings.ToLower(r.kind.typ+"/"+childType)]
	// Children are validated against the new parent and against each
	// other, not against the children the PUT drops: a body that replaces
	// a rule with another of the same priority is valid. On failure
	// everything is put back as it was.
	k := key(r.idStr)
	prevParent := s.resources[k]
	s.resources[k] = r
	replaced := map[string]*resource{} // child key -> what it was (nil: new)
	restore := func() {
		if prevParent != nil {
			s.resources[k] = prevParent
		} else {
			delete(s.resources, k)
		}
		for ck, c := range replaced {
			if c != nil {
				s.resources[ck] = c
			} else {
				delete(s.resources, ck)
			}
		}
	}
	want := map[string]bool{}
	for _, it := range items {
		m, _ := it.(map[string]any)
		if name := str(m, "name"); name != "" {
			want[key(r.id.Child(childType, name).String())] = true
		}
	}
	if old != nil {
		for _, c := range s.children(old.id, childType) {
			ck := key(c.idStr)
			if want[ck] {
				continue
			}
			if childKind.canDelete != nil {
				if e := childKind.canDelete(s, c); e != nil {
					restore()
					return e
				}
			}
			replaced[ck] = c
			delete(s.resources, ck)
		}
	}
	for _, it := range items {
		m, _ := it.(map[string]any)
		name := str(m, "name")
		if name == "" {
			restore()
			return invalidParameter(prop, "Each of %s needs a name.", prop)
		}
		c := newResource(r.id.Child(childType, name), childKind, m)
		ck := key(c.idStr)
		prev := s.lookup(c.idStr)
		if prev != nil {
			c.etag = prev.etag
		}
		if childKind.put != nil {
			if e := childKind.put(s, c, prev); e != nil {
				restore()
				return e
			}
		}
		c.setState("Succeeded")
		if c.etag == "" {
			c.etag = newETag()
		}
		if _, seen := replaced[ck]; !seen {
			replaced[ck] = prev
		}
		s.resources[ck] = c
	}
	return nil
}

func putEmbeddedOnly(prop string) func(*Server, *resource, *resource) *armError {
	return func(s *Server, r, old *resource) *armError { return s.putEmbedded(r, old, prop, prop) }
}

func putSubnet(s *Server, r, _ *resource) *armError {
	parent, _ := r.id.Parent()
	vnet := s.lookup(parent.String())
	prefixes, e := prefixesOf(r.props())
	if e != nil {
		return e
	}
	if len(prefixes) == 0 {
		return invalidParameter("addressPrefix", "Subnet %s must have an addressPrefix.", r.id.Name())
	}
	var space []netip.Prefix
	for _, p := range list(vnet.props(), "addressSpace", "addressPrefixes") {
		if pfx, err := netip.ParsePrefix(p.(string)); err == nil {
			space = append(space, pfx)
		}
	}
	for _, p := range prefixes {
		inside := false
		for _, v := range space {
			inside = inside || (v.Bits() <= p.Bits() && v.Contains(p.Addr()))
		}
		if !inside {
			return errorf(http.StatusBadRequest, "NetcfgSubnetRangeOutsideVnet",
				"Subnet '%s' is not valid because its IP address range is outside the IP address range of virtual network '%s'.", r.id.Name(), parent.Name())
		}
		for _, sib := range s.children(parent, "subnets") {
			if strings.EqualFold(sib.id.Name(), r.id.Name()) {
				continue
			}
			other, _ := prefixesOf(sib.props())
			for _, o := range other {
				if o.Overlaps(p) {
					return errorf(http.StatusBadRequest, "NetcfgSubnetRangesOverlap",
						"Subnet '%s' is not valid because its IP address range overlaps with that of an existing subnet '%s' in virtual network '%s'.", r.id.Name(), sib.id.Name(), parent.Name())
				}
			}
		}
	}
	for prop, kind := range map[string]string{"networkSecurityGroup": kindNSG, "routeTable": kindRouteTable, "natGateway": kindNatGateway} {
		if ref := refID(r.props(), prop); ref != "" {
			if e := s.requireRef(r, ref, kind); e != nil {
				return e
			}
		}
	}
	return nil
}

// requireRef checks that a referenced resource exists and has the kind.
func (s *Server) requireRef(from *resource, ref, kind string) *armError {
	t := s.lookup(ref)
	if t == nil || t.deleting || !strings.EqualFold(t.kind.typ, kind) || !sameLocation(s.regionOf(from), s.regionOf(t)) {
		return invalidReference(from.idStr, ref)
	}
	return nil
}

// regionOf is a resource's location, or its parent's for a child resource
// (a subnet is where its VNet is). References across regions fail as
// references to nothing: Azure looks a referenced resource up in the
// referrer's region ("make sure that the referenced resource exists, and
// that both resources are in the same region").
func (s *Server) regionOf(r *resource) string {
	for r != nil {
		if l := str(r.body, "location"); l != "" {
			return l
		}
		parent, ok := r.id.Parent()
		if !ok {
			return ""
		}
		r = s.lookup(parent.String())
	}
	return ""
}

// nicsUsing returns the NICs (VM and scale-set instance NICs) whose IP
// configurations satisfy match.
func (s *Server) nicsUsing(match func(ipc map[string]any) bool) []*resource {
	var out []*resource
	for _, res := range s.resources {
		if res.kind.typ != kindNIC && res.kind.typ != kindInstanceNIC {
			continue
		}
		for _, ipc := range list(res.props(), "ipConfigurations") {
			if m, ok := ipc.(map[string]any); ok && match(m) {
				out = append(out, res)
				break
			}
		}
	}
	sortResources(out)
	return out
}

func subnetInUse(s *Server, r *resource) *armError {
	users := s.nicsUsing(func(ipc map[string]any) bool { return strings.EqualFold(refID(ipc, "properties", "subnet"), r.idStr) })
	if len(users) > 0 {
		return errorf(http.StatusBadRequest, "InUseSubnetCannotBeDeleted",
			"Subnet %s is in use by %s/ipConfigurations and cannot be deleted. In order to delete the subnet, delete all the resources within the subnet.", r.id.Name(), users[0].idStr)
	}
	return nil
}

func deleteVNetCheck(s *Server, r *resource) *armError {
	for _, sn := range s.children(r.id, "subnets") {
		if e := subnetInUse(s, sn); e != nil {
			return e
		}
	}
	return nil
}

func referencedBySubnet(prop string) func(*Server, *resource) *armError {
	return func(s *Server, r *resource) *armError {
		for _, res := range s.resources {
			if res.kind.typ == kindSubnet && strings.EqualFold(refID(res.props(), prop), r.idStr) {
				return errorf(http.StatusBadRequest, "InUseNetworkSecurityGroupCannotBeDeleted",
					"%s %s is in use by subnet %s and cannot be deleted.", r.kind.typ, r.id.Name(), res.idStr)
			}
		}
		return nil
	}
}

func putNSG(s *Server, r, old *resource) *armError {
	return s.putEmbedded(r, old, "securityRules", "securityRules")
}

func putRule(s *Server, r, _ *resource) *armError {
	p := r.props()
	prio, _ := p["priority"].(float64)
	if prio < 100 || prio > 4096 {
		return errorf(http.StatusBadRequest, "SecurityRuleInvalidPriority", "Security rule %s has invalid priority %v. Value provided: %v Allowed range 100-4096.", r.id.Name(), prio, prio)
	}
	switch strings.ToLower(str(p, "protocol")) {
	case "tcp", "udp", "icmp", "*", "esp", "ah":
	default:
		return errorf(http.StatusBadRequest, "SecurityRuleInvalidProtocol", "Security rule %s has invalid Protocol %q. Allowed: Tcp, Udp, Icmp, Esp, Ah, *.", r.id.Name(), str(p, "protocol"))
	}
	dir := str(p, "direction")
	if dir != "Inbound" && dir != "Outbound" {
		return errorf(http.StatusBadRequest, "SecurityRuleInvalidDirection", "Security rule %s has invalid direction %q.", r.id.Name(), dir)
	}
	if a := str(p, "access"); a != "Allow" && a != "Deny" {
		return errorf(http.StatusBadRequest, "SecurityRuleInvalidAccess", "Security rule %s has invalid access %q.", r.id.Name(), a)
	}
	parent, _ := r.id.Parent()
	for _, sib := range s.children(parent, "securityRules") {
		if !strings.EqualFold(sib.id.Name(), r.id.Name()) && get(sib.props(), "priority") == p["priority"] && str(sib.props(), "direction") == dir {
			return errorf(http.StatusBadRequest, "SecurityRuleConflict", "Security rule %s conflicts with rule %s. Rules cannot have the same Priority and Direction.", r.id.Name(), sib.id.Name())
		}
	}
	return nil
}

func putRoute(_ *Server, r, _ *resource) *armError {
	if _, e := prefixesOf(r.props()); e != nil {
		return e
	}
	if str(r.props(), "nextHopType") == "" {
		return invalidParameter("nextHopType", "Route %s needs a nextHopType.", r.id.Name())
	}
	return nil
}

func putNatGateway(s *Server, r, _ *resource) *armError {
	for _, ip := range list(r.props(), "publicIpAddresses") {
		if m, ok := ip.(map[string]any); ok {
			if e := s.requireRef(r, str(m, "id"), kindPublicIP); e != nil {
				return e
			}
		}
	}
	return nil
}

// putPublicIP hands out an address from the loopback pool, keeping it
// across updates as a static Azure public IP keeps its address.
func putPublicIP(s *Server, r, old *resource) *armError {
	p := r.props()
	if str(p, "publicIPAllocationMethod") == "" {
		p["publicIPAllocationMethod"] = "Static"
	}
	if _, ok := r.body["sku"]; !ok {
		r.body["sku"] = map[string]any{"name": "Standard"}
	}
	if old != nil && str(old.props(), "ipAddress") != "" {
		p["ipAddress"] = str(old.props(), "ipAddress")
	} else {
		ip, e := s.allocatePublicIP()
		if e != nil {
			return e
		}
		p["ipAddress"] = ip
	}
	// GET shows these defaults (specs' PublicIpAddressGet.json).
	if str(p, "publicIPAddressVersion") == "" {
		p["publicIPAddressVersion"] = "IPv4"
	}
	if _, ok := p["idleTimeoutInMinutes"]; !ok {
		p["idleTimeoutInMinutes"] = 4
	}
	if label := str(p, "dnsSettings", "domainNameLabel"); label != "" {
		if !dnsLabel.MatchString(label) {
			// The code and text of Azure's answer, as quoted in
			// deis/deis#4854 and JetBrains/teamcity-azure-agent#42.
			return errorf(http.StatusBadRequest, "InvalidDomainNameLabel", "The domain name label %s is invalid. It must conform to the following regular expression: ^[a-z][a-z0-9-]{1,61}[a-z0-9]$.", label)
		}
		fqdn := label + "." + normalizeLocation(str(r.body, "location")) + ".cloudapp.azure.com"
		// A label names a DNS record in the region, for all of Azure.
		for _, other := range s.resources {
			if other.kind.typ == kindPublicIP && !strings.EqualFold(other.idStr, r.idStr) && strings.EqualFold(str(other.props(), "dnsSettings", "fqdn"), fqdn) {
				return errorf(http.StatusBadRequest, "DnsRecordInUse", "DNS record %s is already used by another public IP.", fqdn)
			}
		}
		obj(p, "dnsSettings")["fqdn"] = fqdn
	}
	return nil
}

// dnsLabel is the rule Azure states in its InvalidDomainNameLabel answer.
var dnsLabel = regexp.MustCompile(`^[a-z][a-z0-9-]{1,61}[a-z0-9]$`)

func (s *Server) allocatePublicIP() (string, *armError) {
	used := map[string]bool{}
	for _, res := range s.resources {
		if res.kind.typ == kindPublicIP {
			used[str(res.props(), "ipAddress")] = true
		}
	}
	pool := s.opts.PublicIPPool
	start := pool.Addr().Next()
	if pool.Contains(s.opts.PublicIPStart) {
		start = s.opts.PublicIPStart
	}
	// From start to the pool's end, then from its beginning to start.
	for _, r := range [][2]netip.Addr{{start, netip.Addr{}}, {pool.Addr().Next(), start}} {
		for a := r[0]; pool.Contains(a) && a != r[1]; a = a.Next() {
			if b := a.As4(); b[3] == 0 || b[3] == 255 {
				continue
			}
			if !used[a.String()] {
				return a.String(), nil
			}
		}
	}
	return "", errorf(http.StatusConflict, "PublicIPCountLimitReached", "Cannot create more than %d public IP addresses for this subscription in this region.", len(used))
}

func publicIPInUse(s *Server, r *resource) *armError {
	for _, res := range s.resources {
		switch res.kind.typ {
		case kindLB:
			for _, fe := range list(res.props(), "frontendIPConfigurations") {
				if m, ok := fe.(map[string]any); ok && strings.EqualFold(refID(m, "properties", "publicIPAddress"), r.idStr) {
					return errorf(http.StatusBadRequest, "PublicIPAddressCannotBeDeleted", "Public IP address %s can not be deleted since it is still allocated to resource %s.", r.idStr, res.idStr)
				}
			}
		case kindNIC:
			for _, ipc := range list(res.props(), "ipConfigurations") {
				if m, ok := ipc.(map[string]any); ok && strings.EqualFold(refID(m, "properties", "publicIPAddress"), r.idStr) {
					return errorf(http.StatusBadRequest, "PublicIPAddressCannotBeDeleted", "Public IP address %s can not be deleted since it is still allocated to resource %s.", r.idStr, res.idStr)
				}
			}
		}
	}
	return nil
}

// subIDs gives each named sub-object of a resource (a load balancer's
// frontends and pools) its ID, and returns the names.
func subIDs(r *resource, prop string) map[string]bool {
	names := map[string]bool{}
	for _, it := range list(r.props(), prop) {
		if m, ok := it.(map[string]any); ok {
			m["id"] = r.idStr + "/" + prop + "/" + str(m, "name")
			names[strings.ToLower(str(m, "name"))] = true
			obj(m, "properties")["provisioningState"] = "Succeeded"
		}
	}
	return names
}

func subRefName(lb *resource, ref, prop string) (string, bool) {
	prefix := strings.ToLower(lb.idStr + "/" + prop + "/")
	if !strings.HasPrefix(strings.ToLower(ref), prefix) {
		return "", false
	}
	return strings.ToLower(ref[len(prefix):]), true
}

func putLB(s *Server, r, old *resource) *armError {
	frontends := subIDs(r, "frontendIPConfigurations")
	pools := subIDs(r, "backendAddressPools")
	probes := subIDs(r, "probes")
	subIDs(r, "loadBalancingRules")
	if len(frontends) == 0 && (len(pools) > 0 || len(probes) > 0 || len(list(r.props(), "loadBalancingRules")) > 0) {
		return errorf(http.StatusBadRequest, "LoadBalancerWithoutFrontendIPCantHaveChildResources", "Load balancer %s has no frontend IP configuration and cannot have backend pools, probes or rules.", r.idStr)
	}
	if len(frontends) == 0 {
		return invalidParameter("frontendIPConfigurations", "Load balancer %s needs at least one frontend IP configuration.", r.id.Name())
	}
	for _, fe := range list(r.props(), "frontendIPConfigurations") {
		m := fe.(map[string]any)
		p := obj(m, "properties")
		if pip := refID(p, "publicIPAddress"); pip != "" {
			if e := s.requireRef(r, pip, kindPublicIP); e != nil {
				return e
			}
			for _, other := range s.resources {
				if other.kind.typ != kindLB || strings.EqualFold(other.idStr, r.idStr) {
					continue
				}
				for _, ofe := range list(other.props(), "frontendIPConfigurations") {
					if om, ok := ofe.(map[string]any); ok && strings.EqualFold(refID(om, "properties", "publicIPAddress"), pip) {
						return errorf(http.StatusBadRequest, "PublicIPAddressInUse", "Resource %s is referencing public IP address %s that is already allocated to resource %s.", r.idStr, pip, other.idStr)
					}
				}
			}
		} else if sn := refID(p, "subnet"); sn != "" {
			if e := s.requireRef(r, sn, kindSubnet); e != nil {
				return e
			}
			if e := s.assignPrivateIP(r, p, sn, old); e != nil {
				return e
			}
		} else {
			return invalidParameter("frontendIPConfigurations", "Frontend %s needs a publicIPAddress or a subnet.", str(m, "name"))
		}
	}
	if e := s.validateLBParts(r, frontends, pools, probes); e != nil {
		return e
	}
	return s.putEmbedded(r, old, "inboundNatRules", "inboundNatRules")
}

func putNatRule(s *Server, r, _ *resource) *armError {
	parent, _ := r.id.Parent()
	lb := s.lookup(parent.String())
	p := r.props()
	fe := refID(p, "frontendIPConfiguration")
	name, ok := subRefName(lb, fe, "frontendIPConfigurations")
	found := false
	for _, f := range list(lb.props(), "frontendIPConfigurations") {
		found = found || (ok && strings.EqualFold(str(f.(map[string]any), "name"), name))
	}
	if !found {
		return invalidReference(r.idStr, fe)
	}
	port := p["frontendPort"]
	for _, sib := range s.children(parent, "inboundNatRules") {
		if strings.EqualFold(sib.id.Name(), r.id.Name()) {
			continue
		}
		sp := sib.props()
		if sp["frontendPort"] == port && strings.EqualFold(refID(sp, "frontendIPConfiguration"), fe) && strings.EqualFold(str(sp, "protocol"), str(p, "protocol")) {
			return errorf(http.StatusBadRequest, "InboundNatRuleFrontendPortConflict",
				"Inbound NAT rule %s uses frontend port %v, which inbound NAT rule %s of load balancer %s already uses on the same frontend IP configuration.", r.id.Name(), port, sib.id.Name(), parent.Name())
		}
	}
	return nil
}

func natRuleInUse(s *Server, r *resource) *armError {
	users := s.nicsUsing(func(ipc map[string]any) bool {
		for _, ref := range list(ipc, "properties", "loadBalancerInboundNatRules") {
			if m, ok := ref.(map[string]any); ok && strings.EqualFold(str(m, "id"), r.idStr) {
				return true
			}
		}
		return false
	})
	if len(users) > 0 {
		return errorf(http.StatusBadRequest, "InboundNatRuleInUse", "Inbound NAT rule %s is referenced by %s and cannot be deleted.", r.idStr, users[0].idStr)
	}
	return nil
}

func lbInUse(s *Server, r *resource) *armError {
	prefix := strings.ToLower(r.idStr + "/")
	users := s.nicsUsing(func(ipc map[string]any) bool {
		for _, prop := range []string{"loadBalancerBackendAddressPools", "loadBalancerInboundNatRules"} {
			for _, ref := range list(ipc, "properties", prop) {
				if m, ok := ref.(map[string]any); ok && strings.HasPrefix(strings.ToLower(str(m, "id")), prefix) {
					return true
				}
			}
		}
		return false
	})
	if len(users) > 0 {
		return errorf(http.StatusBadRequest, "LoadBalancerInUseByVirtualMachineScaleSet", "Load balancer %s is referenced by %s and cannot be deleted.", r.idStr, users[0].idStr)
	}
	return nil
}

// assignPrivateIP gives an IP configuration (p: its properties) an address
// in its subnet: the requested one if Static, otherwise the old one or the
// next free one. Azure reserves the first four addresses and the last.
func (s *Server) assignPrivateIP(owner *resource, p map[string]any, subnetID string, old *resource) *armError {
	subnet := s.lookup(subnetID)
	prefixes, _ := prefixesOf(subnet.props())
	used := s.usedPrivateIPs(subnetID, owner.idStr)
	want := str(p, "privateIPAddress")
	if strings.EqualFold(str(p, "privateIPAllocationMethod"), "Static") {
		ip, err := netip.ParseAddr(want)
		if err != nil {
			return invalidParameter("privateIPAddress", "Private IP address %q is not a valid IP address.", want)
		}
		inside := false
		for _, pfx := range prefixes {
			inside = inside || pfx.Contains(ip)
		}
		if !inside {
			return errorf(http.StatusBadRequest, "PrivateIPAddressNotInSubnet", "Private static IP address %s does not belong to the range of subnet prefix %v.", want, prefixes)
		}
		if used[want] != "" {
			return errorf(http.StatusBadRequest, "PrivateIPAddressInUse", "IP configuration %s is using the private IP address %s which is already allocated to resource %s.", owner.idStr, want, used[want])
		}
		return nil
	}
	p["privateIPAllocationMethod"] = "Dynamic"
	if want != "" && used[want] == "" {
		for _, pfx := range prefixes {
			if ip, err := netip.ParseAddr(want); err == nil && pfx.Contains(ip) {
				return nil // keeps its address
			}
		}
	}
	for _, pfx := range prefixes {
		a := pfx.Masked().Addr()
		for i := 0; i < 4; i++ {
			a = a.Next()
		}
		for ; pfx.Contains(a); a = a.Next() {
			if !pfx.Contains(a.Next()) {
				break // the broadcast address
			}
			if used[a.String()] == "" {
				p["privateIPAddress"] = a.String()
				return nil
			}
		}
	}
	return errorf(http.StatusBadRequest, "SubnetIsFull", "Subnet %s has no free IP addresses.", subnetID)
}

// usedPrivateIPs maps the addresses taken in a subnet to what holds them,
// leaving out the resource being written.
func (s *Server) usedPrivateIPs(subnetID, except string) map[string]string {
	used := map[string]string{}
	for _, res := range s.resources {
		if strings.EqualFold(res.idStr, except) {
			continue
		}
		var confs []any
		switch res.kind.typ {
		case kindNIC, kindInstanceNIC:
			confs = list(res.props(), "ipConfigurations")
		case kindLB:
			confs = list(res.props(), "frontendIPConfigurations")
		}
		for _, c := range confs {
			m, _ := c.(map[string]any)
			if strings.EqualFold(refID(m, "properties", "subnet"), subnetID) {
				if ip := str(m, "properties", "privateIPAddress"); ip != "" {
					used[ip] = res.idStr
				}
			}
		}
	}
	return used
}

func putNIC(s *Server, r, old *resource) *armError {
	confs := list(r.props(), "ipConfigurations")
	if len(confs) == 0 {
		return invalidParameter("ipConfigurations", "Network interface %s needs at least one IP configuration.", r.id.Name())
	}
	if e := s.fillIPConfigurations(r, confs, old); e != nil {
		return e
	}
	if old != nil {
		if vm, ok := old.props()["virtualMachine"]; ok {
			r.props()["virtualMachine"] = vm
		}
	}
	return nil
}

// fillIPConfigurations validates the references of a NIC's IP
// configurations and assigns their addresses.
func (s *Server) fillIPConfigurations(r *resource, confs []any, old *resource) *armError {
	for i, c := range confs {
		m, ok := c.(map[string]any)
		if !ok || str(m, "name") == "" {
			return invalidParameter("ipConfigurations", "Each IP configuration needs a name.")
		}
		m["id"] = r.idStr + "/ipConfigurations/" + str(m, "name")
		p := obj(m, "properties")
		if _, ok := p["primary"]; !ok {
			p["primary"] = i == 0
		}
		sn := refID(p, "subnet")
		if e := s.requireRef(r, sn, kindSubnet); e != nil {
			return e
		}
		if old != nil {
			// Keep the address unless the subnet or the request changed it.
			for _, oc := range list(old.props(), "ipConfigurations") {
				om := oc.(map[string]any)
				if str(om, "name") == str(m, "name") && strings.EqualFold(refID(om, "properties", "subnet"), sn) && str(p, "privateIPAddress") == "" {
					p["privateIPAddress"] = str(om, "properties", "privateIPAddress")
				}
			}
		}
		if e := s.assignPrivateIP(r, p, sn, old); e != nil {
			return e
		}
		if pip := refID(p, "publicIPAddress"); pip != "" {
			if e := s.requireRef(r, pip, kindPublicIP); e != nil {
				return e
			}
		}
		for _, ref := range list(p, "loadBalancerBackendAddressPools") {
			id := str(ref.(map[string]any), "id")
			if e := s.requireLBPart(r, id, "backendAddressPools"); e != nil {
				return e
			}
			if e := s.poolIsIPBased(r, id); e != nil {
				return e
			}
		}
		for _, ref := range list(p, "loadBalancerInboundNatRules") {
			id := str(ref.(map[string]any), "id")
			if e := s.requireRef(r, id, kindNatRule); e != nil {
				return e
			}
		}
		p["provisioningState"] = "Succeeded"
		p["privateIPAddressVersion"] = "IPv4"
	}
	return nil
}

// requireLBPart checks a reference to a load balancer's sub-object.
func (s *Server) requireLBPart(from *resource, ref, prop string) *armError {
	i := strings.Index(strings.ToLower(ref), "/"+strings.ToLower(prop)+"/")
	if i < 0 {
		return invalidReference(from.idStr, ref)
	}
	lb := s.lookup(ref[:i])
	if lb == nil || lb.kind.typ != kindLB || !sameLocation(s.regionOf(from), s.regionOf(lb)) {
		return invalidReference(from.idStr, ref)
	}
	name, _ := subRefName(lb, ref, prop)
	for _, it := range list(lb.props(), prop) {
		if strings.EqualFold(str(it.(map[string]any), "name"), name) {
			return nil
		}
	}
	return invalidReference(from.idStr, ref)
}

func nicAttached(s *Server, r *resource) *armError {
	if vm := refID(r.props(), "virtualMachine"); vm != "" && s.lookup(vm) != nil {
		return errorf(http.StatusBadRequest, "NicInUse",
			"Network Interface %s is used by existing resource %s. In order to delete the network interface, it must be dissociated from the resource.", r.idStr, vm)
	}
	return nil
}
