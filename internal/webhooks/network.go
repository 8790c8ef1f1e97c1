package webhooks

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/nsgrules"
)

// The default network keeps clear of the service CIDR kubeadm and winkube's
// flavors use (10.96.0.0/12) and of Calico's pod CIDR (192.168.0.0/16).
const (
	defaultVnetCIDR         = "10.0.0.0/12"
	defaultControlPlaneCIDR = "10.0.0.0/16"
	defaultNodeCIDR         = "10.1.0.0/16"
)

func defaultNetwork(clusterName string, n *infrav1.NetworkSpec) {
	if n.Vnet.Name == "" {
		n.Vnet.Name = clusterName + "-vnet"
	}
	defaultVnet := len(n.Vnet.CIDRBlocks) == 0
	if defaultVnet {
		n.Vnet.CIDRBlocks = []string{defaultVnetCIDR}
	}
	if len(n.Subnets) == 0 {
		n.Subnets = []infrav1.SubnetSpec{
			{Name: clusterName + "-controlplane-subnet", Role: infrav1.SubnetControlPlane},
			{Name: clusterName + "-node-subnet", Role: infrav1.SubnetNode},
		}
	}
	for i := range n.Subnets {
		s := &n.Subnets[i]
		// Subnet ranges are invented only inside the default VNet; inside a
		// user's address space a guess could collide with what is there.
		if len(s.CIDRBlocks) == 0 && defaultVnet {
			switch s.Role {
			case infrav1.SubnetControlPlane:
				s.CIDRBlocks = []string{defaultControlPlaneCIDR}
			case infrav1.SubnetNode:
				s.CIDRBlocks = []string{defaultNodeCIDR}
			}
		}
		if s.SecurityGroup.Name == "" {
			s.SecurityGroup.Name = s.Name + "-nsg"
		}
	}
	if n.APIServerLB.Name == "" {
		n.APIServerLB.Name = clusterName + "-public-lb"
	}
	if n.APIServerLB.Type == "" {
		n.APIServerLB.Type = "Public"
	}
}

func parseCIDR(s string, p *field.Path) (netip.Prefix, *field.Error) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, field.Invalid(p, s, "must be a CIDR block such as 10.0.0.0/16")
	}
	if pfx.Masked() != pfx {
		return netip.Prefix{}, field.Invalid(p, s, fmt.Sprintf("has host bits set: did you mean %s?", pfx.Masked()))
	}
	return pfx, nil
}

type namedPrefix struct {
	prefix netip.Prefix
	path   *field.Path
}

func parseCIDRs(blocks []string, p *field.Path) ([]namedPrefix, field.ErrorList) {
	var out []namedPrefix
	var errs field.ErrorList
	for i, b := range blocks {
		pfx, err := parseCIDR(b, p.Index(i))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, namedPrefix{pfx, p.Index(i)})
	}
	return out, errs
}

func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

func validateNetwork(n *infrav1.NetworkSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	vnetPath := p.Child("vnet", "cidrBlocks")
	vnet, e := parseCIDRs(n.Vnet.CIDRBlocks, vnetPath)
	errs = append(errs, e...)
	for i := range vnet {
		for j := i + 1; j < len(vnet); j++ {
			if vnet[i].prefix.Overlaps(vnet[j].prefix) {
				errs = append(errs, field.Invalid(vnet[j].path, vnet[j].prefix.String(), fmt.Sprintf("overlaps %s: a VNet's address spaces must not overlap", vnet[i].prefix)))
			}
		}
	}

	roles := map[infrav1.SubnetRole]int{}
	var subnets []namedPrefix
	for i, s := range n.Subnets {
		sp := p.Child("subnets").Index(i)
		roles[s.Role]++
		if len(s.CIDRBlocks) == 0 {
			errs = append(errs, field.Required(sp.Child("cidrBlocks"), fmt.Sprintf("set a CIDR block inside the VNet's address space %v", n.Vnet.CIDRBlocks)))
		}
		blocks, e := parseCIDRs(s.CIDRBlocks, sp.Child("cidrBlocks"))
		errs = append(errs, e...)
		for _, b := range blocks {
			inside := false
			for _, v := range vnet {
				inside = inside || contains(v.prefix, b.prefix)
			}
			if !inside && len(vnet) > 0 {
				errs = append(errs, field.Invalid(b.path, b.prefix.String(), fmt.Sprintf("is not inside the VNet's address space %v: change the subnet or add an address space to spec.networkSpec.vnet.cidrBlocks", n.Vnet.CIDRBlocks)))
			}
			for _, other := range subnets {
				if other.prefix.Overlaps(b.prefix) {
					errs = append(errs, field.Invalid(b.path, b.prefix.String(), fmt.Sprintf("overlaps %s at %s: subnets must not overlap", other.prefix, other.path)))
				}
			}
			subnets = append(subnets, b)
		}
		errs = append(errs, validateRules(s, sp.Child("securityGroup", "securityRules"))...)
	}
	if len(n.Subnets) > 0 {
		if roles[infrav1.SubnetControlPlane] != 1 {
			errs = append(errs, field.Invalid(p.Child("subnets"), roles[infrav1.SubnetControlPlane],
				"exactly one subnet must have role control-plane"))
		}
		if roles[infrav1.SubnetNode] == 0 {
			errs = append(errs, field.Required(p.Child("subnets"), "at least one subnet must have role node"))
		}
	}
	if n.APIServerLB.Type == "Internal" && n.APIServerLB.PrivateIP != "" {
		ip, err := netip.ParseAddr(n.APIServerLB.PrivateIP)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("apiServerLB", "privateIP"), n.APIServerLB.PrivateIP, "must be an IP address"))
		} else {
			inCP := false
			for i, s := range n.Subnets {
				if s.Role != infrav1.SubnetControlPlane {
					continue
				}
				blocks, _ := parseCIDRs(s.CIDRBlocks, p.Child("subnets").Index(i))
				for _, b := range blocks {
					inCP = inCP || b.prefix.Contains(ip)
				}
			}
			if !inCP {
				errs = append(errs, field.Invalid(p.Child("apiServerLB", "privateIP"), n.APIServerLB.PrivateIP, "must be inside the control-plane subnet"))
			}
		}
	}
	return errs
}

// validateClusterNetworkAgainstVnet refuses pod and service ranges that
// overlap the VNet: routes to pods and service VIPs would shadow real hosts,
// and Windows' OutBoundNAT exceptions could not tell them apart.
func validateClusterNetworkAgainstVnet(vnetBlocks []string, kind string, ranges []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range ranges {
		pfx, err := netip.ParsePrefix(r)
		if err != nil {
			continue // Cluster API validates its own field
		}
		for _, v := range vnetBlocks {
			vp, err := netip.ParsePrefix(v)
			if err == nil && vp.Overlaps(pfx.Masked()) {
				errs = append(errs, field.Invalid(p.Index(i), r, fmt.Sprintf("the %s CIDR overlaps the VNet address space %s: choose a %s range outside it (for example 192.168.0.0/16 for pods, 10.96.0.0/12 for services)", kind, v, kind)))
			}
		}
	}
	return errs
}

// validateRules refuses what Azure would refuse for the whole NSG, so
// that none of the cluster's rules would be written: two rules of one
// direction and priority (SecurityRuleConflict), two of one name, a rule
// that takes the name or the priority of one of winkube's own, and a
// description longer than Azure keeps with winkube's mark before it.
func validateRules(s infrav1.SubnetSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	builtin := nsgrules.Node("")
	if s.Role == infrav1.SubnetControlPlane {
		builtin = nsgrules.ControlPlane()
	}
	priorities := map[string]string{}
	names := map[string]bool{}
	for j, r := range s.SecurityGroup.SecurityRules {
		rp := p.Index(j)
		key := strings.ToLower(r.Direction) + "/" + fmt.Sprint(r.Priority)
		if prev, ok := priorities[key]; ok {
			errs = append(errs, field.Duplicate(rp.Child("priority"),
				fmt.Sprintf("%d %s (already used by rule %s; Azure refuses two rules of one direction and priority)", r.Priority, r.Direction, prev)))
		}
		priorities[key] = r.Name
		if names[strings.ToLower(r.Name)] {
			errs = append(errs, field.Duplicate(rp.Child("name"), r.Name))
		}
		names[strings.ToLower(r.Name)] = true
		if why := nsgrules.Conflict(builtin, r.Name, r.Direction, r.Priority); why != "" {
			errs = append(errs, field.Invalid(rp, r.Name, why))
		}
		if len(r.Description) > nsgrules.MaxDescription {
			errs = append(errs, field.TooLong(rp.Child("description"), r.Description, nsgrules.MaxDescription))
		}
	}
	return errs
}

// immutableNetworkNames refuses renaming what winkube made by name: a new
// name makes a new load balancer, subnet or NSG and leaves the old one in
// the group (the old load balancer keeps the API server's public IP, so
// the new one cannot take it). Adding subnets is allowed; renaming or
// removing one is not.
func immutableNetworkNames(oldN, n *infrav1.NetworkSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if oldN.APIServerLB.Name != "" && oldN.APIServerLB.Name != n.APIServerLB.Name {
		errs = append(errs, field.Forbidden(p.Child("apiServerLB", "name"), fmt.Sprintf("cannot change once set (was %s): the load balancer holds the API server's address", oldN.APIServerLB.Name)))
	}
	byName := map[string]int{}
	for i, s := range n.Subnets {
		byName[s.Name] = i
	}
	for _, old := range oldN.Subnets {
		i, ok := byName[old.Name]
		if !ok {
			errs = append(errs, field.Forbidden(p.Child("subnets"), fmt.Sprintf("subnet %s cannot be renamed or removed once created: machines hold addresses in it", old.Name)))
			continue
		}
		if oldNSG := old.SecurityGroup.Name; oldNSG != "" && oldNSG != n.Subnets[i].SecurityGroup.Name {
			errs = append(errs, field.Forbidden(p.Child("subnets").Index(i).Child("securityGroup", "name"), fmt.Sprintf("cannot change once set (was %s): a new name makes a second NSG and leaves this one behind", oldNSG)))
		}
	}
	return errs
}

// refusedOnWrite refuses what winkube cannot carry out, when it is
// written: on create (old nil), or on an update that changes it, so that an
// object written before these checks can still be updated and deleted.
func refusedOnWrite(old, spec *infrav1.AzureClusterSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := &spec.NetworkSpec
	if n.APIServerLB.Type == "Internal" && (old == nil || old.NetworkSpec.APIServerLB.Type != "Internal") {
		errs = append(errs, field.NotSupported(p.Child("networkSpec", "apiServerLB", "type"), n.APIServerLB.Type, []string{"Public"}))
	}
	oldRules := map[string]infrav1.SecurityRule{}
	if old != nil {
		for _, s := range old.NetworkSpec.Subnets {
			for _, r := range s.SecurityGroup.SecurityRules {
				oldRules[s.Name+"/"+r.Name] = r
			}
		}
	}
	for i, s := range n.Subnets {
		for j, r := range s.SecurityGroup.SecurityRules {
			if prev, ok := oldRules[s.Name+"/"+r.Name]; ok && prev == r {
				continue
			}
			rp := p.Child("networkSpec", "subnets").Index(i).Child("securityGroup", "securityRules").Index(j)
			for _, f := range []struct{ name, v string }{{"sourcePorts", r.SourcePorts}, {"destinationPorts", r.DestinationPorts}, {"source", r.Source}, {"destination", r.Destination}} {
				if strings.ContainsAny(f.v, ", ") {
					errs = append(errs, field.Invalid(rp.Child(f.name), f.v,
						"takes one value (a port, a range such as 8000-8080, an address prefix, a service tag or *): Azure refuses a list here, and the whole NSG with it; write one rule per value"))
				}
			}
		}
	}
	return errs
}
