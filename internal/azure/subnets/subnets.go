// Package subnets manages subnets one by one, for VNets winkube does not own
// (a user's VNet is never replaced, only given the cluster's subnets).
package subnets

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vnets"
)

// Service manages subnets.
type Service struct{ c *armnetwork.SubnetsClient }

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewSubnetsClient)
	return &Service{c: c}, err
}

// Reconcile creates or updates one subnet of a VNet.
func (s *Service) Reconcile(ctx context.Context, rg, vnet string, spec vnets.Subnet, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, rg, vnet, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		return async.Succeeded(cur.Properties.ProvisioningState) && vnets.SubnetMatches(cur.Properties, spec), nil
	}, func(tok string) (*runtime.Poller[armnetwork.SubnetsClientCreateOrUpdateResponse], error) {
		return s.c.BeginCreateOrUpdate(ctx, rg, vnet, spec.Name, armnetwork.Subnet{Properties: vnets.SubnetProperties(spec)},
			&armnetwork.SubnetsClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Delete deletes one subnet.
func (s *Service) Delete(ctx context.Context, rg, vnet, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.SubnetsClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, vnet, name, &armnetwork.SubnetsClientBeginDeleteOptions{ResumeToken: tok})
	})
}
