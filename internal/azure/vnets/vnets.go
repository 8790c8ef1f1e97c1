// Package vnets manages virtual networks with their subnets.
package vnets

import (
	"context"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Subnet is a subnet and what is attached to it.
type Subnet struct {
	Name         string
	CIDRs        []string
	NSGID        string
	RouteTableID string
	NatGatewayID string
}

// Spec is a VNet. ARM replaces a VNet's subnets with those of a PUT, so the
// spec always carries all of them.
type Spec struct {
	ResourceGroup, Name, Location string
	CIDRs                         []string
	Subnets                       []Subnet
	Tags                          map[string]*string
}

// ResourceRef makes a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }

// OwnerTags is nil: the caller tells a user's VNet (never written; the
// cluster adds its subnets one by one) from the cluster's.
func (s Spec) OwnerTags() map[string]*string { return nil }

// Parameters creates or updates the VNet and its subnets, merged with what
// Azure has (Merged): subnets that are not the spec's (added by a user or
// another tool) are kept, as is what others set on the spec's subnets
// (service endpoints, delegations); the reconciler sends the VNet's ETag
// (If-Match), so that a subnet added between the read and the write is
// not dropped. Nil when the VNet is provisioned as the spec says.
func (s Spec) Parameters(existing *armnetwork.VirtualNetwork) (*armnetwork.VirtualNetwork, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) && matches(existing, s) {
		return nil, nil
	}
	body := Merged(s, existing)
	return &body, nil
}

// Service manages VNets.
type Service struct {
	kind *async.Kind[armnetwork.VirtualNetwork]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewVirtualNetworksClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.VirtualNetwork]{
		Noun: "virtual network",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.VirtualNetwork, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.VirtualNetwork, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.VirtualNetwork, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.VirtualNetworksClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.VirtualNetworksClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(v *armnetwork.VirtualNetwork) *string { return v.Etag },
		Tags: func(v *armnetwork.VirtualNetwork) map[string]*string { return v.Tags },
	}}, nil
}

// Get returns the VNet, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.VirtualNetwork, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates or updates the VNet and its subnets (see Parameters).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// Merged is the PUT body for a spec given the VNet as Azure has it
// (nil when it does not exist). A VNet's PUT replaces its subnets, so the
// subnets Azure has are sent back: the spec's with the spec's prefixes and
// references over what else they carry, the others as they are.
func Merged(spec Spec, existing *armnetwork.VirtualNetwork) armnetwork.VirtualNetwork {
	var have []*armnetwork.Subnet
	if existing != nil && existing.Properties != nil {
		have = existing.Properties.Subnets
	}
	byName := map[string]*armnetwork.Subnet{}
	for _, sn := range have {
		if sn.Name != nil {
			byName[strings.ToLower(*sn.Name)] = sn
		}
	}
	var subnets []*armnetwork.Subnet
	taken := map[string]bool{}
	for _, sn := range spec.Subnets {
		var props *armnetwork.SubnetPropertiesFormat
		if cur := byName[strings.ToLower(sn.Name)]; cur != nil {
			props = MergedSubnet(sn, cur.Properties)
		} else {
			props = SubnetProperties(sn)
		}
		taken[strings.ToLower(sn.Name)] = true
		subnets = append(subnets, &armnetwork.Subnet{Name: to.Ptr(sn.Name), Properties: props})
	}
	for _, sn := range have {
		if sn.Name != nil && !taken[strings.ToLower(*sn.Name)] {
			subnets = append(subnets, sn)
		}
	}
	out := armnetwork.VirtualNetwork{
		Location: to.Ptr(spec.Location), Tags: spec.Tags,
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: to.SliceOfPtrs(spec.CIDRs...)},
			Subnets:      subnets,
		},
	}
	if existing != nil && existing.Properties != nil {
		// A PUT replaces the whole VNet: what others set on it (DNS
		// servers, a DDoS protection plan, an address space they added,
		// encryption, flow timeout) is sent back as Azure has it. CAPZ
		// starts from the existing VNet too (azure/services/
		// virtualnetworks/spec.go Parameters, kubernetes-sigs/cluster-
		// api-provider-azure 69ec3a40), but sets the address space to the
		// spec's; here a prefix someone added stays.
		props := *existing.Properties
		props.Subnets = subnets
		props.AddressSpace = &armnetwork.AddressSpace{AddressPrefixes: unionPrefixes(existing.Properties.AddressSpace, spec.CIDRs)}
		props.VirtualNetworkPeerings = nil
		out.Properties = &props
		out.Tags = tags.Merge(existing.Tags, spec.Tags)
	}
	return out
}

// unionPrefixes is the address space Azure has with the spec's prefixes
// that it lacks.
func unionPrefixes(have *armnetwork.AddressSpace, want []string) []*string {
	var out []*string
	seen := map[string]bool{}
	if have != nil {
		for _, p := range have.AddressPrefixes {
			if p != nil && !seen[*p] {
				seen[*p] = true
				out = append(out, p)
			}
		}
	}
	for _, p := range want {
		if !seen[p] {
			seen[p] = true
			out = append(out, to.Ptr(p))
		}
	}
	return out
}

// MergedSubnet is a subnet as the spec says, over what else Azure has for
// it (nil when nothing): the spec's prefixes and references win, the rest
// (service endpoints, delegations, policies others set) stays.
func MergedSubnet(sn Subnet, cur *armnetwork.SubnetPropertiesFormat) *armnetwork.SubnetPropertiesFormat {
	props := SubnetProperties(sn)
	if cur == nil {
		return props
	}
	merged := *cur
	merged.AddressPrefix, merged.AddressPrefixes = props.AddressPrefix, props.AddressPrefixes
	merged.NetworkSecurityGroup, merged.RouteTable, merged.NatGateway = props.NetworkSecurityGroup, props.RouteTable, props.NatGateway
	// Read-only lists that Azure computes are not sent.
	merged.IPConfigurations, merged.IPConfigurationProfiles, merged.PrivateEndpoints = nil, nil, nil
	return &merged
}

// SubnetProperties is the SDK form of a subnet.
func SubnetProperties(sn Subnet) *armnetwork.SubnetPropertiesFormat {
	p := &armnetwork.SubnetPropertiesFormat{AddressPrefixes: to.SliceOfPtrs(sn.CIDRs...)}
	if len(sn.CIDRs) == 1 {
		p = &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr(sn.CIDRs[0])}
	}
	if sn.NSGID != "" {
		p.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: to.Ptr(sn.NSGID)}
	}
	if sn.RouteTableID != "" {
		p.RouteTable = &armnetwork.RouteTable{ID: to.Ptr(sn.RouteTableID)}
	}
	if sn.NatGatewayID != "" {
		p.NatGateway = &armnetwork.SubResource{ID: to.Ptr(sn.NatGatewayID)}
	}
	return p
}

func matches(cur *armnetwork.VirtualNetwork, spec Spec) bool {
	// Prefixes others added to the address space are theirs to keep.
	if cur.Properties.AddressSpace == nil || len(unionPrefixes(cur.Properties.AddressSpace, spec.CIDRs)) != len(unionPrefixes(cur.Properties.AddressSpace, nil)) {
		return false
	}
	have := map[string]*armnetwork.Subnet{}
	for _, sn := range cur.Properties.Subnets {
		have[strings.ToLower(*sn.Name)] = sn
	}
	for _, w := range spec.Subnets {
		sn := have[strings.ToLower(w.Name)]
		if sn == nil || !SubnetMatches(sn.Properties, w) {
			return false
		}
	}
	return true
}

// SubnetMatches compares a subnet with its spec.
func SubnetMatches(p *armnetwork.SubnetPropertiesFormat, w Subnet) bool {
	prefixes := p.AddressPrefixes
	if p.AddressPrefix != nil {
		prefixes = append(prefixes, p.AddressPrefix)
	}
	ref := func(s *string) string {
		if s == nil {
			return ""
		}
		return strings.ToLower(*s)
	}
	var nsg, rt, nat *string
	if p.NetworkSecurityGroup != nil {
		nsg = p.NetworkSecurityGroup.ID
	}
	if p.RouteTable != nil {
		rt = p.RouteTable.ID
	}
	if p.NatGateway != nil {
		nat = p.NatGateway.ID
	}
	return strings.Join(sorted(prefixes), ",") == strings.Join(sortedS(w.CIDRs), ",") &&
		ref(nsg) == strings.ToLower(w.NSGID) && ref(rt) == strings.ToLower(w.RouteTableID) && ref(nat) == strings.ToLower(w.NatGatewayID)
}

func sorted(p []*string) []string {
	var out []string
	for _, s := range p {
		if s != nil {
			out = append(out, *s)
		}
	}
	sort.Strings(out)
	return out
}

func sortedS(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// Delete deletes the VNet.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
