// Package routetables manages route tables (host-gw networking programs
// routes into them).
package routetables

import (
	"context"

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

// ResourceRef and OwnerTags make a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref        { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }
func (s Spec) OwnerTags() map[string]*string { return s.Tags }

// Parameters creates the route table when it is missing. Routes in it are
// the CNI's and the cloud provider's to manage, so a table that exists is
// written again only when it is not Succeeded, and then with the routes
// and settings Azure has for it (Merged) and its ETag, never as an empty
// table.
func (s Spec) Parameters(existing *armnetwork.RouteTable) (*armnetwork.RouteTable, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) {
		return nil, nil
	}
	body := Merged(s, existing)
	return &body, nil
}

// Merged is the PUT body for a spec given the table as Azure has it:
// its routes and settings kept, the spec's location and tags.
func Merged(spec Spec, existing *armnetwork.RouteTable) armnetwork.RouteTable {
	out := armnetwork.RouteTable{Location: to.Ptr(spec.Location), Tags: spec.Tags}
	if existing != nil && existing.Properties != nil {
		props := *existing.Properties
		props.Subnets = nil
		out.Properties = &props
		out.Tags = tags.Merge(existing.Tags, spec.Tags)
	}
	return out
}

// Service manages route tables.
type Service struct {
	kind *async.Kind[armnetwork.RouteTable]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewRouteTablesClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.RouteTable]{
		Noun: "route table",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.RouteTable, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.RouteTable, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.RouteTable, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.RouteTablesClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.RouteTablesClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(t *armnetwork.RouteTable) *string { return t.Etag },
		Tags: func(t *armnetwork.RouteTable) map[string]*string { return t.Tags },
	}}, nil
}

// Get returns the route table, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.RouteTable, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates the route table when it is missing (see Parameters).
// An existing table that is not the cluster's is refused
// (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// Delete deletes the route table.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
