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

// Reconcile creates or updates the VNet and its subnets.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.Get(ctx, spec.ResourceGroup, spec.Name)
		return cur != nil && async.Succeeded(cur.Properties.ProvisioningState) && matches(cur, spec), err
	}, func(tok string) (*runtime.Poller[armnetwork.VirtualNetworksClientCreateOrUpdateResponse], error) {
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, Model(spec), &armnetwork.VirtualNetworksClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Model is the SDK model of a spec.
func Model(spec Spec) armnetwork.VirtualNetwork {
	var subnets []*armnetwork.Subnet
	for _, sn := range spec.Subnets {
		subnets = append(subnets, &armnetwork.Subnet{Name: to.Ptr(sn.Name), Properties: SubnetProperties(sn)})
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
	if len(cur.Properties.Subnets) != len(spec.Subnets) {
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
