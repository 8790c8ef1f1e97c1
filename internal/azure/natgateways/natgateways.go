// Package natgateways manages the NAT gateway that gives nodes outbound access.
package natgateways

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
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

// Service manages NAT gateways.
type Service struct{ c *armnetwork.NatGatewaysClient }

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewNatGatewaysClient)
	return &Service{c: c}, err
}

// Get returns the gateway, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.NatGateway, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.NatGateway, nil
}

// Reconcile creates or updates the gateway; one that is not the cluster's is
// refused (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, spec.ResourceGroup, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		if err := tags.CheckOwned("NAT gateway", spec.Name, spec.Tags, cur.Tags); err != nil {
			return false, err
		}
		ips := cur.Properties.PublicIPAddresses
		return async.Succeeded(cur.Properties.ProvisioningState) && len(ips) == 1 && *ips[0].ID == spec.PublicIPID, nil
	}, func(tok string) (*runtime.Poller[armnetwork.NatGatewaysClientCreateOrUpdateResponse], error) {
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, armnetwork.NatGateway{
			Location: to.Ptr(spec.Location), Tags: spec.Tags,
			SKU:        &armnetwork.NatGatewaySKU{Name: to.Ptr(armnetwork.NatGatewaySKUNameStandard)},
			Properties: &armnetwork.NatGatewayPropertiesFormat{PublicIPAddresses: []*armnetwork.SubResource{{ID: to.Ptr(spec.PublicIPID)}}},
		}, &armnetwork.NatGatewaysClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Delete deletes the gateway.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.NatGatewaysClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.NatGatewaysClientBeginDeleteOptions{ResumeToken: tok})
	})
}
