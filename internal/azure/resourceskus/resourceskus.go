// Package resourceskus reads what a location offers this subscription from
// the resource SKUs API: the availability zones a cluster's failure domains
// come from, each VM size's capabilities and restrictions, and the fault
// domains of its availability sets.
package resourceskus

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// refresh is how long a location's SKUs are kept: restrictions change
// when a subscription's quota or offer does, rarely, and the list is long.
const refresh = 30 * time.Minute

// Service answers from a cached list per location.
type Service struct {
	c  *armcompute.ResourceSKUsClient
	mu sync.Mutex
	// byLocation holds each location's SKUs and when they were read.
	byLocation map[string]cached
}

type cached struct {
	skus []*armcompute.ResourceSKU
	at   time.Time
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armcompute.NewResourceSKUsClient)
	return &Service{c: c, byLocation: map[string]cached{}}, err
}

func (s *Service) list(ctx context.Context, location string) ([]*armcompute.ResourceSKU, error) {
	location = norm(location)
	s.mu.Lock()
	c, ok := s.byLocation[location]
	s.mu.Unlock()
	if ok && time.Since(c.at) < refresh {
		return c.skus, nil
	}
	var out []*armcompute.ResourceSKU
	p := s.c.NewListPager(&armcompute.ResourceSKUsClientListOptions{Filter: to.Ptr("location eq '" + location + "'")})
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Value...)
	}
	s.mu.Lock()
	s.byLocation[location] = cached{out, time.Now()}
	s.mu.Unlock()
	return out, nil
}

// Size is what a location offers of one VM size.
type Size struct {
	Name string
	// Zones are the zones where this subscription may deploy the size.
	Zones []string
	// Restricted says the subscription may not deploy the size in the
	// location at all; Reason is Azure's reasonCode.
	Restricted bool
	Reason     string
	// Generations are the Hyper-V generations it boots ("V1", "V2").
	Generations []string
	// AcceleratedNetworking and PremiumIO are its capabilities.
	AcceleratedNetworking, PremiumIO bool
}

// Boots says whether the size boots an image of a Hyper-V generation.
func (z Size) Boots(generation string) bool {
	for _, g := range z.Generations {
		if strings.EqualFold(g, generation) {
			return true
		}
	}
	return false
}

// InZone says whether the subscription may deploy the size in a zone ("",
// no zone, needs only the location).
func (z Size) InZone(zone string) bool {
	if z.Restricted {
		return false
	}
	if zone == "" {
		return true
	}
	for _, have := range z.Zones {
		if have == zone {
			return true
		}
	}
	return false
}

// VMSize returns a VM size in a location; ok is false when the location
// does not offer it.
func (s *Service) VMSize(ctx context.Context, location, name string) (size Size, ok bool, err error) {
	skus, err := s.list(ctx, location)
	if err != nil {
		return Size{}, false, err
	}
	for _, sku := range skus {
		if deref(sku.ResourceType) != "virtualMachines" || !strings.EqualFold(deref(sku.Name), name) {
			continue
		}
		size = Size{Name: deref(sku.Name)}
		size.Zones, size.Restricted, size.Reason = zonesOf(sku, location)
		for _, c := range sku.Capabilities {
			switch deref(c.Name) {
			case "HyperVGenerations":
				for _, g := range strings.Split(deref(c.Value), ",") {
					size.Generations = append(size.Generations, strings.TrimSpace(g))
				}
			case "AcceleratedNetworkingEnabled":
				size.AcceleratedNetworking = strings.EqualFold(deref(c.Value), "True")
			case "PremiumIO":
				size.PremiumIO = strings.EqualFold(deref(c.Value), "True")
			}
		}
		return size, true, nil
	}
	return Size{}, false, nil
}

// Zones lists the zones where the subscription may run some VM size in a
// location (none for a location without availability zones): CAPZ's
// GetZones (azure/services/resourceskus/cache.go @69ec3a40) — a size
// restricted in the whole location gives none, one restricted in some
// zones gives the others.
func (s *Service) Zones(ctx context.Context, location string) ([]string, error) {
	skus, err := s.list(ctx, location)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, sku := range skus {
		if deref(sku.ResourceType) != "virtualMachines" {
			continue
		}
		zones, _, _ := zonesOf(sku, location)
		for _, z := range zones {
			seen[z] = true
		}
	}
	out := []string{}
	for zone := range seen {
		out = append(out, zone)
	}
	sort.Strings(out)
	return out, nil
}

// MaxFaultDomains is the most fault domains an availability set may have
// in the location: the Aligned availability-set SKU's
// MaximumPlatformFaultDomainCount, which CAPZ reads too.
func (s *Service) MaxFaultDomains(ctx context.Context, location string) (int32, error) {
	skus, err := s.list(ctx, location)
	if err != nil {
		return 0, err
	}
	for _, sku := range skus {
		if deref(sku.ResourceType) != "availabilitySets" || deref(sku.Name) != "Aligned" {
			continue
		}
		for _, c := range sku.Capabilities {
			if deref(c.Name) == "MaximumPlatformFaultDomainCount" {
				n, err := strconv.Atoi(deref(c.Value))
				return int32(n), err
			}
		}
	}
	return 0, nil
}

// zonesOf are a size's zones in the location less its restrictions.
func zonesOf(sku *armcompute.ResourceSKU, location string) (zones []string, restricted bool, reason string) {
	for _, r := range sku.Restrictions {
		if r.Type != nil && *r.Type == armcompute.ResourceSKURestrictionsTypeLocation {
			if r.ReasonCode != nil {
				reason = string(*r.ReasonCode)
			}
			return nil, true, reason
		}
	}
	blocked := map[string]bool{}
	for _, r := range sku.Restrictions {
		if r.RestrictionInfo != nil {
			for _, z := range r.RestrictionInfo.Zones {
				blocked[deref(z)] = true
			}
		}
	}
	for _, li := range sku.LocationInfo {
		if norm(deref(li.Location)) != norm(location) {
			continue
		}
		for _, z := range li.Zones {
			if !blocked[deref(z)] {
				zones = append(zones, deref(z))
			}
		}
	}
	sort.Strings(zones)
	return zones, false, ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// norm is a location's name ("westeurope") from either spelling ARM
// accepts ("West Europe").
func norm(location string) string { return strings.ToLower(strings.ReplaceAll(location, " ", "")) }
