// Package vnets manages virtual networks with their subnets.
package vnets

import (
	"context"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
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

// Service manages VNets.
type Service struct {
	c *armnetwork.VirtualNetworksClient
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewVirtualNetworksClient)
	return &Service{c: c}, err
}

// Get returns the VNet, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.VirtualNetwork, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.VirtualNetwork, nil
}

// Reconcile creates or updates the VNet and its subnets. Subnets that are
// not the spec's (added by a user or another tool) are kept, as is what
// others set on the spec's subnets (service endpoints, delegations), and
// the write carries the VNet's ETag (If-Match), so that a subnet added
// between the read and the write is not dropped.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	var existing *armnetwork.VirtualNetwork
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.Get(ctx, spec.ResourceGroup, spec.Name)
		existing = cur
		return cur != nil && async.Succeeded(cur.Properties.ProvisioningState) && matches(cur, spec), err
	}, func(tok string) (*runtime.Poller[armnetwork.VirtualNetworksClientCreateOrUpdateResponse], error) {
		var etag *string
		if existing != nil {
			etag = existing.Etag
		}
		return s.c.BeginCreateOrUpdate(async.IfMatch(ctx, etag), spec.ResourceGroup, spec.Name, Parameters(spec, existing), &armnetwork.VirtualNetworksClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Parameters is the PUT body for a spec given the VNet as Azure has it
// (nil when it does not exist). A VNet's PUT replaces its subnets, so the
// subnets Azure has are sent back: the spec's with the spec's prefixes and
// references over what else they carry, the others as they are.
func Parameters(spec Spec, existing *armnetwork.VirtualNetwork) armnetwork.VirtualNetwork {
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
		props := SubnetProperties(sn)
		if cur := byName[strings.ToLower(sn.Name)]; cur != nil && cur.Properties != nil {
			merged := *cur.Properties
			merged.AddressPrefix, merged.AddressPrefixes = props.AddressPrefix, props.AddressPrefixes
			merged.NetworkSecurityGroup, merged.RouteTable, merged.NatGateway = props.NetworkSecurityGroup, props.RouteTable, props.NatGateway
			// Read-only lists that Azure computes are not sent.
			merged.IPConfigurations, merged.IPConfigurationProfiles, merged.PrivateEndpoints = nil, nil, nil
			props = &merged
		}
		taken[strings.ToLower(sn.Name)] = true
		subnets = append(subnets, &armnetwork.Subnet{Name: to.Ptr(sn.Name), Properties: props})
	}
	for _, sn := range have {
		if sn.Name != nil && !taken[strings.ToLower(*sn.Name)] {
			subnets = append(subnets, sn)
		}
	}
	return armnetwork.VirtualNetwork{
		Location: to.Ptr(spec.Location), Tags: spec.Tags,
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: to.SliceOfPtrs(spec.CIDRs...)},
			Subnets:      subnets,
		},
	}
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
	if strings.Join(sorted(cur.Properties.AddressSpace.AddressPrefixes), ",") != strings.Join(sortedS(spec.CIDRs), ",") {
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
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.VirtualNetworksClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.VirtualNetworksClientBeginDeleteOptions{ResumeToken: tok})
	})
}
