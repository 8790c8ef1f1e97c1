// Package networkinterfaces manages VM NICs.
package networkinterfaces

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Spec is a NIC with one IP configuration.
type Spec struct {
	ResourceGroup, Name, Location string
	SubnetID                      string
	// BackendPoolIDs and NatRuleIDs join the API server's load balancer.
	BackendPoolIDs []string
	NatRuleIDs     []string
	Accelerated    bool
	// IPForwarding lets the NIC carry other addresses' traffic.
	IPForwarding bool
	Tags         map[string]*string
}

// Service manages NICs.
type Service struct{ c *armnetwork.InterfacesClient }

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewInterfacesClient)
	return &Service{c: c}, err
}

// Get returns the NIC, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.Interface, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.Interface, nil
}

// Reconcile creates the NIC when it is missing.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.Get(ctx, spec.ResourceGroup, spec.Name)
		return cur != nil && async.Succeeded(cur.Properties.ProvisioningState), err
	}, func(tok string) (*runtime.Poller[armnetwork.InterfacesClientCreateOrUpdateResponse], error) {
		ipc := &armnetwork.InterfaceIPConfigurationPropertiesFormat{
			Subnet:                    &armnetwork.Subnet{ID: to.Ptr(spec.SubnetID)},
			PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic),
			Primary:                   to.Ptr(true),
		}
		for _, id := range spec.BackendPoolIDs {
			ipc.LoadBalancerBackendAddressPools = append(ipc.LoadBalancerBackendAddressPools, &armnetwork.BackendAddressPool{ID: to.Ptr(id)})
		}
		for _, id := range spec.NatRuleIDs {
			ipc.LoadBalancerInboundNatRules = append(ipc.LoadBalancerInboundNatRules, &armnetwork.InboundNatRule{ID: to.Ptr(id)})
		}
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, armnetwork.Interface{
			Location: to.Ptr(spec.Location), Tags: spec.Tags,
			Properties: &armnetwork.InterfacePropertiesFormat{
				EnableAcceleratedNetworking: to.Ptr(spec.Accelerated),
				EnableIPForwarding:          to.Ptr(spec.IPForwarding),
				IPConfigurations:            []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"), Properties: ipc}},
			},
		}, &armnetwork.InterfacesClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// PrivateIP is the NIC's first private address.
func PrivateIP(nic *armnetwork.Interface) string {
	for _, c := range nic.Properties.IPConfigurations {
		if c.Properties != nil && c.Properties.PrivateIPAddress != nil {
			return *c.Properties.PrivateIPAddress
		}
	}
	return ""
}

// Delete deletes the NIC.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.InterfacesClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.InterfacesClientBeginDeleteOptions{ResumeToken: tok})
	})
}
