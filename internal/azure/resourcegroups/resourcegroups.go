// Package resourcegroups creates and deletes the cluster's resource group.
package resourcegroups

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Spec is a resource group.
type Spec struct {
	Name     string
	Location string
	Tags     map[string]*string
}

// Service manages resource groups of one subscription.
type Service struct {
	c    *armresources.ResourceGroupsClient
	res  *armresources.Client
	kind *async.Kind[armresources.ResourceGroup]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armresources.NewResourceGroupsClient)
	if err != nil {
		return nil, err
	}
	res, err := endpoint.NewClient(cfg, subscription, armresources.NewClient)
	if err != nil {
		return nil, err
	}
	return &Service{c: c, res: res, kind: &async.Kind[armresources.ResourceGroup]{
		Noun: "resource group",
		Get: func(ctx context.Context, r async.Ref) (*armresources.ResourceGroup, error) {
			g, err := c.Get(ctx, r.Name, nil)
			return &g.ResourceGroup, err
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.Name, &armresources.ResourceGroupsClientBeginDeleteOptions{ResumeToken: tok}))
		},
		Tags: func(g *armresources.ResourceGroup) map[string]*string { return g.Tags },
	}}, nil
}

// Get returns the group, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, name string) (*armresources.ResourceGroup, error) {
	return s.kind.Read(ctx, async.Ref{Name: name})
}

// Reconcile creates the group if it is missing (a synchronous call in ARM).
// An existing group, owned or not, is left as it is.
func (s *Service) Reconcile(ctx context.Context, spec Spec) error {
	g, err := s.Get(ctx, spec.Name)
	if err != nil || g != nil {
		return err
	}
	_, err = s.c.CreateOrUpdate(ctx, spec.Name, armresources.ResourceGroup{Location: to.Ptr(spec.Location), Tags: spec.Tags}, nil)
	return err
}

// AddTags adds tags to an existing group, keeping its others.
func (s *Service) AddTags(ctx context.Context, name string, add map[string]*string) error {
	g, err := s.Get(ctx, name)
	if err != nil || g == nil {
		return err
	}
	t := map[string]*string{}
	for k, v := range g.Tags {
		t[k] = v
	}
	for k, v := range add {
		t[k] = v
	}
	_, err = s.c.CreateOrUpdate(ctx, name, armresources.ResourceGroup{Location: g.Location, Tags: t}, nil)
	return err
}

// Delete deletes the group and everything in it.
func (s *Service) Delete(ctx context.Context, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{Name: name}, token)
}

// Resources lists the IDs of the group's resources.
func (s *Service) Resources(ctx context.Context, name string) ([]string, error) {
	var ids []string
	p := s.res.NewListByResourceGroupPager(name, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Value {
			ids = append(ids, *r.ID)
		}
	}
	return ids, nil
}
