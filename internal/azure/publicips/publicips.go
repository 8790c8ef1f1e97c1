// Package publicips manages public IP addresses.
package publicips

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Spec is a static Standard public IP.
type Spec struct {
	ResourceGroup, Name, Location string
	// DNSLabel, when set, gives the address a name in the location's zone.
	DNSLabel string
	Tags     map[string]*string
}

// ResourceRef and OwnerTags make a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref        { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }
func (s Spec) OwnerTags() map[string]*string { return s.Tags }

// Parameters creates the address when it is missing or not provisioned;
// a provisioned address is never changed, so that the endpoints built on
// it stay valid.
func (s Spec) Parameters(existing *armnetwork.PublicIPAddress) (*armnetwork.PublicIPAddress, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) {
		return nil, nil
	}
	ip := &armnetwork.PublicIPAddress{
		Location: to.Ptr(s.Location), Tags: s.Tags,
		SKU:        &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic)},
	}
	if s.DNSLabel != "" {
		ip.Properties.DNSSettings = &armnetwork.PublicIPAddressDNSSettings{DomainNameLabel: to.Ptr(s.DNSLabel)}
	}
	return ip, nil
}

// Service manages public IPs.
type Service struct {
	kind *async.Kind[armnetwork.PublicIPAddress]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewPublicIPAddressesClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.PublicIPAddress]{
		Noun: "public IP address",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.PublicIPAddress, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.PublicIPAddress, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.PublicIPAddress, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.PublicIPAddressesClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.PublicIPAddressesClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(ip *armnetwork.PublicIPAddress) *string { return ip.Etag },
		Tags: func(ip *armnetwork.PublicIPAddress) map[string]*string { return ip.Tags },
	}}, nil
}

// Get returns the address, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.PublicIPAddress, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates the address when it is missing. An address that is not
// the cluster's is refused (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// Delete deletes the address.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
