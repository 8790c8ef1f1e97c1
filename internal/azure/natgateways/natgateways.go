// Package natgateways manages the NAT gateway that gives nodes outbound access.
package natgateways

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Spec is a NAT gateway with one public IP.
type Spec struct {
	ResourceGroup, Name, Location string
	PublicIPID                    string
	Tags                          map[string]*string
}

// ResourceRef and OwnerTags make a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref        { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }
func (s Spec) OwnerTags() map[string]*string { return s.Tags }

// Parameters is nil when the gateway exists with the spec's public IP;
// otherwise the gateway as Azure has it (its idle timeout, zones, tags and
// the public IPs and prefixes others attached: a second IP added for SNAT
// ports) with the spec's IP added. CAPZ starts from the existing gateway as
// well (azure/services/natgateways/spec.go Parameters, kubernetes-sigs/
// cluster-api-provider-azure 69ec3a40), but replaces its IPs with its one.
func (s Spec) Parameters(existing *armnetwork.NatGateway) (*armnetwork.NatGateway, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) && hasIP(existing.Properties.PublicIPAddresses, s.PublicIPID) {
		return nil, nil
	}
	out := &armnetwork.NatGateway{
		Location: to.Ptr(s.Location), Tags: s.Tags,
		SKU:        &armnetwork.NatGatewaySKU{Name: to.Ptr(armnetwork.NatGatewaySKUNameStandard)},
		Properties: &armnetwork.NatGatewayPropertiesFormat{},
	}
	if existing != nil {
		out.Zones, out.Tags = existing.Zones, tags.Merge(existing.Tags, s.Tags)
		if existing.Properties != nil {
			props := *existing.Properties
			props.Subnets, props.ProvisioningState, props.ResourceGUID = nil, nil, nil
			out.Properties = &props
		}
	}
	if !hasIP(out.Properties.PublicIPAddresses, s.PublicIPID) {
		out.Properties.PublicIPAddresses = append(out.Properties.PublicIPAddresses, &armnetwork.SubResource{ID: to.Ptr(s.PublicIPID)})
	}
	return out, nil
}

func hasIP(ips []*armnetwork.SubResource, id string) bool {
	for _, ip := range ips {
		if ip != nil && ip.ID != nil && strings.EqualFold(*ip.ID, id) {
			return true
		}
	}
	return false
}

// Service manages NAT gateways.
type Service struct {
	kind *async.Kind[armnetwork.NatGateway]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewNatGatewaysClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.NatGateway]{
		Noun: "NAT gateway",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.NatGateway, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.NatGateway, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.NatGateway, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.NatGatewaysClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.NatGatewaysClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(g *armnetwork.NatGateway) *string { return g.Etag },
		Tags: func(g *armnetwork.NatGateway) map[string]*string { return g.Tags },
	}}, nil
}

// Get returns the gateway, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.NatGateway, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates or updates the gateway; one that is not the cluster's is
// refused (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// Delete deletes the gateway.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
