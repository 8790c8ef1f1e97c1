// Package subnets manages subnets one by one, for VNets winkube does not own
// (a user's VNet is never replaced, only given the cluster's subnets).
//
// Subnets carry no tags in ARM, so ownership cannot be read from Azure: the
// caller records which subnets it created and passes created=false for any
// other. A subnet is then created only where none exists (with
// If-None-Match: *, so that one made meanwhile is not overwritten either),
// and changed only when the caller created it.
package subnets

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vnets"
)

// Service manages subnets.
type Service struct {
	kind *async.Kind[armnetwork.Subnet]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewSubnetsClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.Subnet]{
		Noun: "subnet",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.Subnet, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Parent, r.Name, nil)
			return &cur.Subnet, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.Subnet, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Parent, r.Name, body, &armnetwork.SubnetsClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Parent, r.Name, &armnetwork.SubnetsClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(sn *armnetwork.Subnet) *string { return sn.Etag },
	}}, nil
}

// ExistsError is a subnet that exists but that the caller did not create.
type ExistsError struct{ VNet, Name string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("subnet %s already exists in VNet %s and was not made by winkube: winkube will not change or delete it; "+
		"give the cluster's subnet another name in spec.networkSpec.subnets", e.Name, e.VNet)
}

// Spec is one subnet of a VNet. Created says the caller made it (its
// records say so): a subnet that exists and that the caller did not make
// is an *ExistsError, never written.
type Spec struct {
	ResourceGroup, VNet string
	Subnet              vnets.Subnet
	Created             bool
	// missing is set when Parameters found no subnet: the PUT creates it.
	missing *bool
}

// ResourceRef and OwnerTags make a Spec an async.Spec; subnets carry no
// tags, so ownership is the caller's records.
func (s Spec) ResourceRef() async.Ref {
	return async.Ref{ResourceGroup: s.ResourceGroup, Parent: s.VNet, Name: s.Subnet.Name}
}
func (s Spec) OwnerTags() map[string]*string { return nil }

// ExclusiveCreate: a subnet someone else made between the read and the
// create must not become the cluster's.
func (s Spec) ExclusiveCreate() bool { return true }

// Parameters creates the subnet, or brings one the caller made to the
// spec over what else Azure has for it; nil when it is as the spec says.
func (s Spec) Parameters(existing *armnetwork.Subnet) (*armnetwork.Subnet, error) {
	if s.missing != nil {
		*s.missing = existing == nil
	}
	if existing == nil {
		return &armnetwork.Subnet{Properties: vnets.SubnetProperties(s.Subnet)}, nil
	}
	if !s.Created {
		return nil, &ExistsError{VNet: s.VNet, Name: s.Subnet.Name}
	}
	if existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) && vnets.SubnetMatches(existing.Properties, s.Subnet) {
		return nil, nil
	}
	return &armnetwork.Subnet{Properties: vnets.MergedSubnet(s.Subnet, existing.Properties)}, nil
}

// Get returns the subnet, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, vnet, name string) (*armnetwork.Subnet, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Parent: vnet, Name: name})
}

// Reconcile creates one subnet of a VNet or, when created says the caller
// made it, brings it to the spec. An existing subnet the caller did not make
// is an *ExistsError, also when it was made between the read and the create.
func (s *Service) Reconcile(ctx context.Context, rg, vnet string, sn vnets.Subnet, created bool, token string) (string, bool, error) {
	missing := false
	next, done, err := async.Reconcile(ctx, s.kind, Spec{ResourceGroup: rg, VNet: vnet, Subnet: sn, Created: created, missing: &missing}, token)
	var re *azcore.ResponseError
	if missing && errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed {
		return "", false, &ExistsError{VNet: vnet, Name: sn.Name}
	}
	return next, done, err
}

// Delete deletes one subnet.
func (s *Service) Delete(ctx context.Context, rg, vnet, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Parent: vnet, Name: name}, token)
}
