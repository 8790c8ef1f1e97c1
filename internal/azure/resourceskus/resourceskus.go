// Package resourceskus reads the availability zones of a location from the
// resource SKUs API, for the cluster's failure domains.
package resourceskus

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// Service answers zone questions, caching each location's answer.
type Service struct {
	c     *armcompute.ResourceSKUsClient
	mu    sync.Mutex
	zones map[string][]string
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewResourceSKUsClient)
	return &Service{c: c, zones: map[string][]string{}}, err
}

// Zones lists the zones where VMs can run in a location (none for a
// location without availability zones).
func (s *Service) Zones(ctx context.Context, location string) ([]string, error) {
	s.mu.Lock()
	z, ok := s.zones[location]
	s.mu.Unlock()
	if ok {
		return z, nil
	}
	seen := map[string]bool{}
	p := s.c.NewListPager(&armcompute.ResourceSKUsClientListOptions{Filter: to.Ptr("location eq '" + location + "'")})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, sku := range page.Value {
			if sku.ResourceType == nil || *sku.ResourceType != "virtualMachines" {
				continue
			}
			for _, li := range sku.LocationInfo {
				if li.Location != nil && strings.EqualFold(*li.Location, location) {
					for _, zone := range li.Zones {
						seen[*zone] = true
					}
				}
			}
		}
	}
	out := []string{}
	for zone := range seen {
		out = append(out, zone)
	}
	sort.Strings(out)
	s.mu.Lock()
	s.zones[location] = out
	s.mu.Unlock()
	return out, nil
}
