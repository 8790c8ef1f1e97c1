// Package networkinterfaces manages VM NICs.
package networkinterfaces

import (
	"context"

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
	// PublicIPID gives the NIC a public address of its own (a plain VM's,
	// as 'az vm create' makes one).
	PublicIPID string
	Tags       map[string]*string
}

// ResourceRef makes a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }

// OwnerTags is nil: a machine claims its NIC's name before making it (the
// controller's records), so the name alone decides.
func (s Spec) OwnerTags() map[string]*string { return nil }

// Parameters creates the NIC when it is missing or not provisioned; a
// provisioned NIC is left as it is (its VM holds it).
func (s Spec) Parameters(existing *armnetwork.Interface) (*armnetwork.Interface, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) {
		return nil, nil
	}
	ipc := &armnetwork.InterfaceIPConfigurationPropertiesFormat{
		Subnet:                    &armnetwork.Subnet{ID: to.Ptr(s.SubnetID)},
		PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic),
		Primary:                   to.Ptr(true),
	}
	for _, id := range s.BackendPoolIDs {
		ipc.LoadBalancerBackendAddressPools = append(ipc.LoadBalancerBackendAddressPools, &armnetwork.BackendAddressPool{ID: to.Ptr(id)})
	}
	if s.PublicIPID != "" {
		ipc.PublicIPAddress = &armnetwork.PublicIPAddress{ID: to.Ptr(s.PublicIPID)}
	}
	for _, id := range s.NatRuleIDs {
		ipc.LoadBalancerInboundNatRules = append(ipc.LoadBalancerInboundNatRules, &armnetwork.InboundNatRule{ID: to.Ptr(id)})
	}
	return &armnetwork.Interface{
		Location: to.Ptr(s.Location), Tags: s.Tags,
		Properties: &armnetwork.InterfacePropertiesFormat{
			EnableAcceleratedNetworking: to.Ptr(s.Accelerated),
			EnableIPForwarding:          to.Ptr(s.IPForwarding),
			IPConfigurations:            []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"), Properties: ipc}},
		},
	}, nil
}

// Service manages NICs.
type Service struct {
	kind *async.Kind[armnetwork.Interface]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewInterfacesClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.Interface]{
		Noun: "network interface",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.Interface, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.Interface, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.Interface, tok string) (async.Poller, error) {
			return async.WrapResult(func(res armnetwork.InterfacesClientCreateOrUpdateResponse) armnetwork.Interface { return res.Interface })(
				c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.InterfacesClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.InterfacesClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(n *armnetwork.Interface) *string { return n.Etag },
		Tags: func(n *armnetwork.Interface) map[string]*string { return n.Tags },
	}}, nil
}

// Get returns the NIC, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.Interface, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates the NIC when it is missing.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// ReconcileRead is Reconcile that returns the NIC once it is made (as read
// when it needed nothing, or as the PUT's final response carried it; nil
// while under way), so that the caller need not read it again for its
// address.
func (s *Service) ReconcileRead(ctx context.Context, spec Spec, token string) (nic *armnetwork.Interface, next string, done bool, err error) {
	next, done, nic, err = async.ReconcileFrom(ctx, s.kind, spec, token, nil)
	return nic, next, done, err
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
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
