// Package loadbalancers manages load balancers: the API server's (one
// frontend on a public IP, one backend pool, a TCP probe and a rule for the
// API port) through Spec and Reconcile, and load balancers shared with
// others through Get and Put.
package loadbalancers

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

const (
	// Frontend, Backend and Probe name the load balancer's parts.
	Frontend = "frontend"
	Backend  = "backend"
	Probe    = "apiserver"
)

// Spec is the API server's load balancer.
type Spec struct {
	ResourceGroup, Name, Location string
	SubscriptionID                string
	PublicIPID                    string
	Port                          int32
	Tags                          map[string]*string
}

// ID is the ARM ID of the load balancer.
func (s Spec) ID() string {
	return "/subscriptions/" + s.SubscriptionID + "/resourceGroups/" + s.ResourceGroup + "/providers/Microsoft.Network/loadBalancers/" + s.Name
}

// FrontendID, BackendPoolID are the IDs of its parts.
func (s Spec) FrontendID() string    { return s.ID() + "/frontendIPConfigurations/" + Frontend }
func (s Spec) BackendPoolID() string { return s.ID() + "/backendAddressPools/" + Backend }

// Service manages load balancers.
type Service struct {
	c *armnetwork.LoadBalancersClient
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewLoadBalancersClient)
	return &Service{c: c}, err
}

// Get returns the load balancer, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.LoadBalancer, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.LoadBalancer, nil
}

// Reconcile creates the load balancer, or brings it back to the spec. Its
// inbound NAT rules are managed one by one (inboundnatrules) and carried
// over from the existing load balancer, since a PUT replaces them. A load
// balancer that is not the cluster's is refused (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	var natRules []*armnetwork.InboundNatRule
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, spec.ResourceGroup, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		if err := tags.CheckOwned("load balancer", spec.Name, spec.Tags, cur.Tags); err != nil {
			return false, err
		}
		natRules = cur.Properties.InboundNatRules
		p := cur.Properties
		ok := async.Succeeded(p.ProvisioningState) && len(p.FrontendIPConfigurations) == 1 && len(p.LoadBalancingRules) == 1 &&
			p.FrontendIPConfigurations[0].Properties.PublicIPAddress != nil && *p.FrontendIPConfigurations[0].Properties.PublicIPAddress.ID == spec.PublicIPID &&
			*p.LoadBalancingRules[0].Properties.FrontendPort == spec.Port
		return ok, nil
	}, func(tok string) (*runtime.Poller[armnetwork.LoadBalancersClientCreateOrUpdateResponse], error) {
		m := model(spec)
		m.Properties.InboundNatRules = natRules
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, m, &armnetwork.LoadBalancersClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

func model(spec Spec) armnetwork.LoadBalancer {
	return armnetwork.LoadBalancer{
		Location: to.Ptr(spec.Location), Tags: spec.Tags,
		SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr(Frontend), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{
				PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(spec.PublicIPID)},
			}}},
			BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr(Backend)}},
			Probes: []*armnetwork.Probe{{Name: to.Ptr(Probe), Properties: &armnetwork.ProbePropertiesFormat{
				Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr(spec.Port), IntervalInSeconds: to.Ptr[int32](15), NumberOfProbes: to.Ptr[int32](4),
			}}},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("apiserver"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(spec.Port), BackendPort: to.Ptr(spec.Port),
				IdleTimeoutInMinutes: to.Ptr[int32](4), EnableFloatingIP: to.Ptr(false),
				FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(spec.FrontendID())},
				BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(spec.BackendPoolID())},
				Probe:                   &armnetwork.SubResource{ID: to.Ptr(spec.ID() + "/probes/" + Probe)},
			}}},
		},
	}
}

// Delete deletes the load balancer.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.LoadBalancersClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.LoadBalancersClientBeginDeleteOptions{ResumeToken: tok})
	})
}
