// Package disks deletes the managed OS disks VMs leave behind.
package disks

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Service manages disks.
type Service struct{ kind *async.Kind[armcompute.Disk] }

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewDisksClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armcompute.Disk]{
		Noun: "disk",
		Get: func(ctx context.Context, r async.Ref) (*armcompute.Disk, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.Disk, err
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armcompute.DisksClientBeginDeleteOptions{ResumeToken: tok}))
		},
	}}, nil
}

// Get returns the disk, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.Disk, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Delete deletes the disk.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
