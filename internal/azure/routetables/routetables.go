// Package routetables manages route tables (host-gw networking programs
// routes into them).
package routetables

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// Spec is a route table.
type Spec struct {
	ResourceGroup, Name, Location string
	Tags                          map[string]*string
}

// Service manages route tables.
type Service struct{ c *armnetwork.RouteTablesClient }

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewRouteTablesClient)
	return &Service{c: c}, err
}

// Get returns the route table, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.RouteTable, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.RouteTable, nil
}

// Reconcile creates the route table when it is missing; routes in it are the
// CNI's and the cloud provider's to manage, so a table that exists is
// written again only when it is not Succeeded, and then with the routes and
// settings Azure has for it and its ETag (If-Match), never an empty table.
// An existing table that is not the cluster's is refused
// (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	var existing *armnetwork.RouteTable
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, spec.ResourceGroup, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		if err := tags.CheckOwned("route table", spec.Name, spec.Tags, cur.Tags); err != nil {
			return false, err
		}
		existing = &cur.RouteTable
		return async.Succeeded(cur.Properties.ProvisioningState), nil
	}, func(tok string) (*runtime.Poller[armnetwork.RouteTablesClientCreateOrUpdateResponse], error) {
		var etag *string
		if existing != nil {
			etag = existing.Etag
		}
		return s.c.BeginCreateOrUpdate(async.IfMatch(ctx, etag), spec.ResourceGroup, spec.Name, Parameters(spec, existing),
			&armnetwork.RouteTablesClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Parameters is the PUT body for a spec given the table as Azure has it:
// its routes and settings kept, the spec's location and tags.
func Parameters(spec Spec, existing *armnetwork.RouteTable) armnetwork.RouteTable {
	out := armnetwork.RouteTable{Location: to.Ptr(spec.Location), Tags: spec.Tags}
	if existing != nil && existing.Properties != nil {
		props := *existing.Properties
		props.Subnets = nil
		out.Properties = &props
	}
	return out
}

// Delete deletes the route table.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.RouteTablesClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armnetwork.RouteTablesClientBeginDeleteOptions{ResumeToken: tok})
	})
}
