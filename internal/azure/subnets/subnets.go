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
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
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

// ExistsError is a subnet that exists but that the caller did not create.
type ExistsError struct{ VNet, Name string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("subnet %s already exists in VNet %s and was not made by winkube: winkube will not change or delete it; "+
		"give the cluster's subnet another name in spec.networkSpec.subnets", e.Name, e.VNet)
}

// Get returns the subnet, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, vnet, name string) (*armnetwork.Subnet, error) {
	cur, err := s.c.Get(ctx, rg, vnet, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.Subnet, nil
}

// Reconcile creates one subnet of a VNet or, when created says the caller
// made it, brings it to the spec. An existing subnet the caller did not make
// is an *ExistsError.
func (s *Service) Reconcile(ctx context.Context, rg, vnet string, spec vnets.Subnet, created bool, token string) (string, bool, error) {
	createOnly := false
	next, done, err := async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.Get(ctx, rg, vnet, spec.Name)
		if err != nil {
			return false, err
		}
		if cur == nil {
			createOnly = true
			return false, nil
		}
		if !created {
			return false, &ExistsError{VNet: vnet, Name: spec.Name}
		}
		return async.Succeeded(cur.Properties.ProvisioningState) && vnets.SubnetMatches(cur.Properties, spec), nil
	}, func(tok string) (*runtime.Poller[armnetwork.SubnetsClientCreateOrUpdateResponse], error) {
		putCtx := ctx
		if createOnly {
			putCtx = policy.WithHTTPHeader(ctx, http.Header{"If-None-Match": []string{"*"}})
		}
		return s.c.BeginCreateOrUpdate(putCtx, rg, vnet, spec.Name, armnetwork.Subnet{Properties: vnets.SubnetProperties(spec)},
			&armnetwork.SubnetsClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
	var re *azcore.ResponseError
	if createOnly && errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed {
		return "", false, &ExistsError{VNet: vnet, Name: spec.Name}
	}
	return next, done, err
}

// Delete deletes one subnet.
func (s *Service) Delete(ctx context.Context, rg, vnet, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.SubnetsClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, vnet, name, &armnetwork.SubnetsClientBeginDeleteOptions{ResumeToken: tok})
	})
}
