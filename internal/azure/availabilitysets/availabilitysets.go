// Package availabilitysets places a node group's VMs in an availability
// set in a location without availability zones, so that Azure spreads
// them over its fault domains, as CAPZ does (azure/services/availabilitysets
// @69ec3a40).
package availabilitysets

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// ControlPlaneGroup is the node group of the control plane's set.
const ControlPlaneGroup = "control-plane"

// Name is a node group's set: <cluster>_<group>-as, CAPZ's name
// (azure/defaults.go GenerateAvailabilitySetName), so that a cluster
// moved between the two providers keeps its sets.
func Name(cluster, group string) string { return fmt.Sprintf("%s_%s-as", cluster, group) }

// ClusterOf is the cluster a set's Name was made for: a cluster's name is
// a DNS label and holds no underscore.
func ClusterOf(name string) string {
	cluster, _, _ := strings.Cut(name, "_")
	return cluster
}

// Spec is a node group's availability set.
type Spec struct {
	ResourceGroup, Name, Location string
	// FaultDomains is the location's MaximumPlatformFaultDomainCount: the
	// more domains, the fewer VMs one rack's failure takes.
	FaultDomains int32
	Tags         map[string]*string
}

// ResourceRef makes a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }

// OwnerTags are the cluster's ownership tag: a set of the same name that
// is someone else's is not used.
func (s Spec) OwnerTags() map[string]*string { return s.Tags }

// Parameters creates the set once, Aligned (the SKU for VMs on managed
// disks). An existing set is never sent again: its fault domains cannot
// change while it holds VMs, and its SKU is right (CAPZ's spec likewise
// returns nil for an existing set).
func (s Spec) Parameters(existing *armcompute.AvailabilitySet) (*armcompute.AvailabilitySet, error) {
	if existing != nil {
		return nil, nil
	}
	if s.FaultDomains < 1 {
		return nil, fmt.Errorf("the location %s gives availability sets no fault domain count", s.Location)
	}
	return &armcompute.AvailabilitySet{
		Location: to.Ptr(s.Location), Tags: s.Tags, SKU: &armcompute.SKU{Name: to.Ptr("Aligned")},
		Properties: &armcompute.AvailabilitySetProperties{PlatformFaultDomainCount: to.Ptr(s.FaultDomains)},
	}, nil
}

// Service manages availability sets.
type Service struct {
	kind *async.Kind[armcompute.AvailabilitySet]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewAvailabilitySetsClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armcompute.AvailabilitySet]{
		Noun: "availability set",
		Get: func(ctx context.Context, r async.Ref) (*armcompute.AvailabilitySet, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.AvailabilitySet, err
		},
		// Both complete within the request: the Compute spec does not
		// make them long-running.
		Put: func(ctx context.Context, r async.Ref, body armcompute.AvailabilitySet, _ string) (async.Poller, error) {
			_, err := c.CreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, nil)
			return async.Sync(err)
		},
		Delete: func(ctx context.Context, r async.Ref, _ string) (async.Poller, error) {
			_, err := c.Delete(ctx, r.ResourceGroup, r.Name, nil)
			return async.Sync(err)
		},
		Tags: func(s *armcompute.AvailabilitySet) map[string]*string { return s.Tags },
	}}, nil
}

// Reconcile makes the set when it is missing.
func (s *Service) Reconcile(ctx context.Context, spec Spec) error {
	_, _, err := async.Reconcile(ctx, s.kind, spec, "")
	return err
}

// Get returns the set, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armcompute.AvailabilitySet, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// DeleteIfEmpty deletes the set once no VM is in it; a set that still
// holds VMs is left to the last of its machines to go (CAPZ's Delete
// skips a set with VMs likewise). A set that is not owner's is left
// alone. done is true when nothing is left for this caller to do.
func (s *Service) DeleteIfEmpty(ctx context.Context, rg, name string, owner tags.Owner) (done bool, err error) {
	set, err := s.Get(ctx, rg, name)
	if err != nil || set == nil {
		return err == nil, err
	}
	if !owner.Owns(set.Tags) || (set.Properties != nil && len(set.Properties.VirtualMachines) > 0) {
		return true, nil
	}
	_, done, err = async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, "")
	return done, err
}
