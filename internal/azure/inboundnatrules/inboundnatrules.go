// Package inboundnatrules manages the SSH NAT rules of the API server's load
// balancer: frontend port 22 for the first control-plane VM, then 2201,
// 2202, ... for the others, each to port 22 of its VM.
package inboundnatrules

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// FirstPort is the first control-plane VM's SSH port; later ones get
// FirstExtraPort, FirstExtraPort+1, ...
const (
	FirstPort      = 22
	FirstExtraPort = 2201
	maxPort        = 2299
)

// Service manages a load balancer's inbound NAT rules.
type Service struct {
	c *armnetwork.InboundNatRulesClient
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewInboundNatRulesClient)
	return &Service{c: c}, err
}

// Ports lists the frontend ports in use, by rule name.
func (s *Service) Ports(ctx context.Context, rg, lb string) (map[string]int32, error) {
	out := map[string]int32{}
	p := s.c.NewListPager(rg, lb, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Value {
			out[strings.ToLower(*r.Name)] = *r.Properties.FrontendPort
		}
	}
	return out, nil
}

// FreePort picks the port for a new rule.
func FreePort(used map[string]int32) (int32, error) {
	taken := map[int32]bool{}
	for _, p := range used {
		taken[p] = true
	}
	if !taken[FirstPort] {
		return FirstPort, nil
	}
	for p := int32(FirstExtraPort); p <= maxPort; p++ {
		if !taken[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free SSH NAT port on the API load balancer between %d and %d", FirstExtraPort, maxPort)
}

// Spec is one rule.
type Spec struct {
	ResourceGroup, LoadBalancer, Name string
	FrontendID                        string
	Port                              int32
}

// Reconcile creates the rule when it is missing; an existing rule keeps the
// port it has, so that SSH to a VM keeps working.
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Ensure(ctx, token, func(ctx context.Context) (bool, error) {
		cur, err := s.c.Get(ctx, spec.ResourceGroup, spec.LoadBalancer, spec.Name, nil)
		if err != nil {
			return false, async.IgnoreNotFound(err)
		}
		return async.Succeeded(cur.Properties.ProvisioningState), nil
	}, func(tok string) (*runtime.Poller[armnetwork.InboundNatRulesClientCreateOrUpdateResponse], error) {
		return s.c.BeginCreateOrUpdate(ctx, spec.ResourceGroup, spec.LoadBalancer, spec.Name, armnetwork.InboundNatRule{Properties: &armnetwork.InboundNatRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(spec.Port), BackendPort: to.Ptr[int32](22),
			FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(spec.FrontendID)},
		}}, &armnetwork.InboundNatRulesClientBeginCreateOrUpdateOptions{ResumeToken: tok})
	})
}

// Delete deletes the rule.
func (s *Service) Delete(ctx context.Context, rg, lb, name, token string) (string, bool, error) {
	return async.Delete(ctx, token, func(tok string) (*runtime.Poller[armnetwork.InboundNatRulesClientDeleteResponse], error) {
		return s.c.BeginDelete(ctx, rg, lb, name, &armnetwork.InboundNatRulesClientBeginDeleteOptions{ResumeToken: tok})
	})
}
