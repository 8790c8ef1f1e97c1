// Package publicips manages public IP addresses.
package publicips

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Spec is a static Standard public IP.
type Spec struct {
	ResourceGroup, Name, Location string
	// DNSLabel, when set, gives the address a name in the location's zone.
	DNSLabel string
	Tags     map[string]*string
}

// Service manages public IPs.
type Service struct {
	c *armnetwork.PublicIPAddressesClient
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewPublicIPAddressesClient)
	return &Service{c: c}, err
}

// Get returns the address, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.PublicIPAddress, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.PublicIPAddress, nil
}

// Reconcile creates the address when it is missing (an address is never
// changed, so that endpoints built on it stay valid). An address that is not
// the cluster's is refused (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.Get(ctx, spec.ResourceGroup, spec.Name)
		if err != nil || cur == nil {
			return false, err
		}
		if err := tags.CheckOwned("public IP address", spec.Name, spec.Tags, cur.Tags); err != nil {
			return false, err
		}
		return async.Succeeded(cur.Properties.ProvisioningState), nil
	}, func(tok string) (*runtime.Poller[armnetwork.PublicIPAddressesClientCreateOrUpdateResponse], error) {
		ip := armnetwork.PublicIPAddress{
			Location: to.Ptr(spec.Location), Tags: spec.Tags,
			SKU:        &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)},
			Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic)},
		}
		if spec.DNSLabel != "" {
			ip.Properties.DNSSettings = &armnetwork.PublicIPAddressDNSSettings{DomainNameLabel: to.Ptr(spec.DNSLabel)}
		}
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.Name, ip, &armnetwork.PublicIPAddressesClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Delete deletes the address.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.PublicIPAddressesClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.PublicIPAddressesClientBeginDeleteOptions{ResumeToken: tok})
	})
}
