// Package cloud builds, once per subscription, the Azure services the
// controllers use, all from one endpoint configuration.
package cloud

import (
	"sync"
	"time"

	"github.com/winkube/winkube/internal/azure/disks"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/inboundnatrules"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/natgateways"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/resourcegroups"
	"github.com/winkube/winkube/internal/azure/resourceskus"
	"github.com/winkube/winkube/internal/azure/routetables"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/securitygroups"
	"github.com/winkube/winkube/internal/azure/subnets"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/azure/vnets"
	"github.com/winkube/winkube/internal/images"
)

// Services are one subscription's Azure services.
type Services struct {
	Subscription string
	Groups       *resourcegroups.Service
	NSGs         *securitygroups.Service
	RouteTables  *routetables.Service
	NatGateways  *natgateways.Service
	PublicIPs    *publicips.Service
	VNets        *vnets.Service
	Subnets      *subnets.Service
	LBs          *loadbalancers.Service
	NatRules     *inboundnatrules.Service
	NICs         *networkinterfaces.Service
	VMs          *virtualmachines.Service
	ScaleSets    *scalesets.Service
	Disks        *disks.Service
	SKUs         *resourceskus.Service
	Images       *images.Resolver
}

// Cloud hands out Services by subscription.
type Cloud struct {
	Endpoint endpoint.Config

	mu   sync.Mutex
	subs map[string]*Services
}

// New returns a Cloud for an endpoint.
func New(cfg endpoint.Config) *Cloud {
	return &Cloud{Endpoint: cfg, subs: map[string]*Services{}}
}

// For returns the services of a subscription.
func (c *Cloud) For(subscription string) (*Services, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.subs[subscription]; ok {
		return s, nil
	}
	// All of a subscription's clients share one transport.
	cfg, err := c.Endpoint.Shared()
	if err != nil {
		return nil, err
	}
	s := &Services{Subscription: subscription}
	set := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	set(func() (e error) { s.Groups, e = resourcegroups.New(subscription, cfg); return })
	set(func() (e error) { s.NSGs, e = securitygroups.New(subscription, cfg); return })
	set(func() (e error) { s.RouteTables, e = routetables.New(subscription, cfg); return })
	set(func() (e error) { s.NatGateways, e = natgateways.New(subscription, cfg); return })
	set(func() (e error) { s.PublicIPs, e = publicips.New(subscription, cfg); return })
	set(func() (e error) { s.VNets, e = vnets.New(subscription, cfg); return })
	set(func() (e error) { s.Subnets, e = subnets.New(subscription, cfg); return })
	set(func() (e error) { s.LBs, e = loadbalancers.New(subscription, cfg); return })
	set(func() (e error) { s.NatRules, e = inboundnatrules.New(subscription, cfg); return })
	set(func() (e error) { s.NICs, e = networkinterfaces.New(subscription, cfg); return })
	set(func() (e error) { s.VMs, e = virtualmachines.New(subscription, cfg); return })
	set(func() (e error) { s.Disks, e = disks.New(subscription, cfg); return })
	set(func() (e error) { s.ScaleSets, e = scalesets.New(subscription, cfg); return })
	set(func() (e error) { s.SKUs, e = resourceskus.New(subscription, cfg); return })
	set(func() error {
		l, e := vmimages.New(subscription, cfg)
		s.Images = images.NewResolver(l, time.Hour)
		return e
	})
	if err != nil {
		return nil, err
	}
	c.subs[subscription] = s
	return s, nil
}
