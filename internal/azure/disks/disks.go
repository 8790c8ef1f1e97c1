// Package disks deletes the managed OS disks VMs leave behind.
package disks

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Service manages disks.
type Service struct{ c *armcompute.DisksClient }

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewDisksClient)
	return &Service{c: c}, err
}

// Get returns the disk, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.Disk, error) {
	cur, err := s.c.Get(ctx, rg, name, nil)
	if err != nil {
		return nil, async.IgnoreNotFound(err)
	}
	return &cur.Disk, nil
}

// Delete deletes the disk.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armcompute.DisksClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, name, &armcompute.DisksClientBeginDeleteOptions{ResumeToken: tok})
	})
}
