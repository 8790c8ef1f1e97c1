// Package inboundnatrules manages the SSH NAT rules of the API server's load
// balancer: frontend port 22 for the first control-plane VM, then 2201,
// 2202, ... for the others, each to port 22 of its VM.
package inboundnatrules

import (
	"context"
	"fmt"
	"strings"

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
	c    *armnetwork.InboundNatRulesClient
	kind *async.Kind[armnetwork.InboundNatRule]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewInboundNatRulesClient)
	if err != nil {
		return nil, err
	}
	return &Service{c: c, kind: &async.Kind[armnetwork.InboundNatRule]{
		Noun: "inbound NAT rule",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.InboundNatRule, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Parent, r.Name, nil)
			return &cur.InboundNatRule, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.InboundNatRule, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Parent, r.Name, body, &armnetwork.InboundNatRulesClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Parent, r.Name, &armnetwork.InboundNatRulesClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(n *armnetwork.InboundNatRule) *string { return n.Etag },
	}}, nil
}

// PortsOf is the frontend ports of a load balancer's rules, by rule name,
// as a GET of the load balancer returns them.
func PortsOf(lb *armnetwork.LoadBalancer) map[string]int32 {
	out := map[string]int32{}
	if lb.Properties == nil {
		return out
	}
	for _, r := range lb.Properties.InboundNatRules {
		if r.Name != nil && r.Properties != nil && r.Properties.FrontendPort != nil {
			out[strings.ToLower(*r.Name)] = *r.Properties.FrontendPort
		}
	}
	return out
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

// ResourceRef makes a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref {
	return async.Ref{ResourceGroup: s.ResourceGroup, Parent: s.LoadBalancer, Name: s.Name}
}

// OwnerTags is nil: rules carry no tags; the load balancer is the cluster's.
func (s Spec) OwnerTags() map[string]*string { return nil }

// Parameters creates the rule when it is missing or not provisioned; an
// existing rule keeps the port it has, so that SSH to a VM keeps working.
func (s Spec) Parameters(existing *armnetwork.InboundNatRule) (*armnetwork.InboundNatRule, error) {
	if existing != nil && existing.Properties != nil && async.Succeeded(existing.Properties.ProvisioningState) {
		return nil, nil
	}
	return &armnetwork.InboundNatRule{Name: to.Ptr(s.Name), Properties: &armnetwork.InboundNatRulePropertiesFormat{
		Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(s.Port), BackendPort: to.Ptr[int32](22),
		FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(s.FrontendID)},
	}}, nil
}

// Reconcile creates the rule when it is missing (see Parameters).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

// Delete deletes the rule.
func (s *Service) Delete(ctx context.Context, rg, lb, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Parent: lb, Name: name}, token)
}
