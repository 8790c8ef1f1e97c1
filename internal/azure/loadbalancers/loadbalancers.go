// Package loadbalancers manages load balancers: the API server's (one
// frontend on a public IP, one backend pool, a TCP probe and a rule for the
// API port) through Spec and Reconcile, and load balancers shared with
// others through Get and Put.
package loadbalancers

import (
	"context"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

const (
	// Frontend, Backend and Probe name the load balancer's parts.
	Frontend = "frontend"
	Backend  = "backend"
	Probe    = "apiserver"
	// ProbePath is the API server's readiness endpoint, which it serves
	// to anonymous clients.
	ProbePath = "/readyz"
	// ProbeInterval is how often, in seconds, Azure probes it (see model).
	ProbeInterval = 5
	// OutboundRule gives the backends outbound connections.
	OutboundRule = "OutboundNATAllProtocols"
)

// Spec is the API server's load balancer.
type Spec struct {
	ResourceGroup, Name, Location string
	SubscriptionID                string
	PublicIPID                    string
	Port                          int32
	Tags                          map[string]*string
}

// ID is the ARM ID of the load balancer.
func (s Spec) ID() string {
	return "/subscriptions/" + s.SubscriptionID + "/resourceGroups/" + s.ResourceGroup + "/providers/Microsoft.Network/loadBalancers/" + s.Name
}

// FrontendID, BackendPoolID are the IDs of its parts.
func (s Spec) FrontendID() string    { return s.ID() + "/frontendIPConfigurations/" + Frontend }
func (s Spec) BackendPoolID() string { return s.ID() + "/backendAddressPools/" + Backend }

// ResourceRef and OwnerTags make a Spec an async.Spec.
func (s Spec) ResourceRef() async.Ref        { return async.Ref{ResourceGroup: s.ResourceGroup, Name: s.Name} }
func (s Spec) OwnerTags() map[string]*string { return s.Tags }

// Parameters creates the load balancer, or brings winkube's parts of it
// (its frontend, backend pool, probe, rule and outbound rule, by name) back
// to the spec. The body is built from the load balancer Azure has: its
// inbound NAT rules (managed one by one, inboundnatrules), the parts others
// added (a frontend, a rule, a pool) and its tags are sent back as they
// are, since a PUT replaces them. CAPZ builds from the existing load
// balancer the same way (azure/services/loadbalancers/spec.go Parameters,
// kubernetes-sigs/cluster-api-provider-azure 69ec3a40, keeps its frontends,
// pools, probes and rules). Nil when it is provisioned as the spec says.
func (s Spec) Parameters(existing *armnetwork.LoadBalancer) (*armnetwork.LoadBalancer, error) {
	m := model(s)
	if existing == nil || existing.Properties == nil {
		return &m, nil
	}
	p := existing.Properties
	if async.Succeeded(p.ProvisioningState) && upToDate(p, s) {
		return nil, nil
	}
	props := *p
	mp := m.Properties
	props.FrontendIPConfigurations = withOurs(p.FrontendIPConfigurations, mp.FrontendIPConfigurations, func(v *armnetwork.FrontendIPConfiguration) *string { return v.Name })
	props.BackendAddressPools = withOurs(p.BackendAddressPools, mp.BackendAddressPools, func(v *armnetwork.BackendAddressPool) *string { return v.Name })
	props.Probes = withOurs(p.Probes, mp.Probes, func(v *armnetwork.Probe) *string { return v.Name })
	props.LoadBalancingRules = withOurs(p.LoadBalancingRules, mp.LoadBalancingRules, func(v *armnetwork.LoadBalancingRule) *string { return v.Name })
	props.OutboundRules = withOurs(p.OutboundRules, mp.OutboundRules, func(v *armnetwork.OutboundRule) *string { return v.Name })
	m.Properties = &props
	m.Tags = tags.Merge(existing.Tags, s.Tags)
	return &m, nil
}

// withOurs is have without the parts named as ours, then ours.
func withOurs[T any](have, ours []*T, name func(*T) *string) []*T {
	mine := map[string]bool{}
	for _, o := range ours {
		mine[strings.ToLower(*name(o))] = true
	}
	var out []*T
	for _, h := range have {
		if n := name(h); h != nil && (n == nil || !mine[strings.ToLower(*n)]) {
			out = append(out, h)
		}
	}
	return append(out, ours...)
}

func named[T any](list []*T, name func(*T) *string, want string) *T {
	for _, v := range list {
		if n := name(v); v != nil && n != nil && strings.EqualFold(*n, want) {
			return v
		}
	}
	return nil
}

// upToDate says whether winkube's parts are as the spec says: the frontend
// on the spec's IP, the rule on its port, and what later winkube versions
// added (the HTTPS readiness probe and its interval, no SNAT on the rule,
// the outbound rule).
func upToDate(p *armnetwork.LoadBalancerPropertiesFormat, s Spec) bool {
	fe := named(p.FrontendIPConfigurations, func(v *armnetwork.FrontendIPConfiguration) *string { return v.Name }, Frontend)
	rule := named(p.LoadBalancingRules, func(v *armnetwork.LoadBalancingRule) *string { return v.Name }, "apiserver")
	probe := named(p.Probes, func(v *armnetwork.Probe) *string { return v.Name }, Probe)
	out := named(p.OutboundRules, func(v *armnetwork.OutboundRule) *string { return v.Name }, OutboundRule)
	if fe == nil || fe.Properties == nil || fe.Properties.PublicIPAddress == nil || !ptrEq(fe.Properties.PublicIPAddress.ID, s.PublicIPID) ||
		rule == nil || rule.Properties == nil || rule.Properties.FrontendPort == nil || *rule.Properties.FrontendPort != s.Port ||
		rule.Properties.DisableOutboundSnat == nil || !*rule.Properties.DisableOutboundSnat || out == nil || probe == nil || probe.Properties == nil ||
		named(p.BackendAddressPools, func(v *armnetwork.BackendAddressPool) *string { return v.Name }, Backend) == nil {
		return false
	}
	pr := probe.Properties
	return pr.Protocol != nil && *pr.Protocol == armnetwork.ProbeProtocolHTTPS && ptrEq(pr.RequestPath, ProbePath) &&
		pr.IntervalInSeconds != nil && *pr.IntervalInSeconds == ProbeInterval
}

func ptrEq(p *string, s string) bool { return p != nil && *p == s }

// Service manages load balancers.
type Service struct {
	kind *async.Kind[armnetwork.LoadBalancer]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armnetwork.NewLoadBalancersClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armnetwork.LoadBalancer]{
		Noun: "load balancer",
		Get: func(ctx context.Context, r async.Ref) (*armnetwork.LoadBalancer, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.LoadBalancer, err
		},
		Put: func(ctx context.Context, r async.Ref, body armnetwork.LoadBalancer, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginCreateOrUpdate(ctx, r.ResourceGroup, r.Name, body, &armnetwork.LoadBalancersClientBeginCreateOrUpdateOptions{ResumeToken: tok}))
		},
		Delete: func(ctx context.Context, r async.Ref, tok string) (async.Poller, error) {
			return async.Wrap(c.BeginDelete(ctx, r.ResourceGroup, r.Name, &armnetwork.LoadBalancersClientBeginDeleteOptions{ResumeToken: tok}))
		},
		ETag: func(lb *armnetwork.LoadBalancer) *string { return lb.Etag },
		Tags: func(lb *armnetwork.LoadBalancer) map[string]*string { return lb.Tags },
	}}, nil
}

// Get returns the load balancer, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, rg, name string) (*armnetwork.LoadBalancer, error) {
	return s.kind.Read(ctx, async.Ref{ResourceGroup: rg, Name: name})
}

// Reconcile creates the load balancer, or brings it back to the spec (see
// Parameters). A load balancer that is not the cluster's is refused
// (*tags.NotOwnedError).
func (s *Service) Reconcile(ctx context.Context, spec Spec, token string) (string, bool, error) {
	return async.Reconcile(ctx, s.kind, spec, token)
}

func model(spec Spec) armnetwork.LoadBalancer {
	return armnetwork.LoadBalancer{
		Location: to.Ptr(spec.Location), Tags: spec.Tags,
		SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr(Frontend), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{
				PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(spec.PublicIPID)},
			}}},
			BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr(Backend)}},
			// The API server is healthy when its /readyz says so, not as soon
			// as its port accepts connections (which it does during a
			// rollout and while etcd is down); one failure takes it out.
			// CAPZ probes the same (azure/services/loadbalancers/spec.go
			// @69ec3a40, getProbes), but every 15 s, Azure's default. The
			// probe's interval is both how long a new control plane's ready
			// API server waits for its first request (Cluster API reaches
			// the workload cluster only then, and the workers' join waits
			// for that) and how long a failed one keeps getting requests:
			// the minimum, 5 s (armnetwork v7.2.0 models.go,
			// ProbePropertiesFormat.IntervalInSeconds), cuts both by two
			// thirds for one HTTPS request per 5 s to each control plane,
			// the interval cloud-provider-azure itself probes Services at
			// (pkg/consts/consts.go HealthProbeDefaultProbeInterval,
			// kubernetes-sigs/cloud-provider-azure @81bcf0f7).
			Probes: []*armnetwork.Probe{{Name: to.Ptr(Probe), Properties: &armnetwork.ProbePropertiesFormat{
				Protocol: to.Ptr(armnetwork.ProbeProtocolHTTPS), Port: to.Ptr(spec.Port), RequestPath: to.Ptr(ProbePath),
				IntervalInSeconds: to.Ptr[int32](ProbeInterval), ProbeThreshold: to.Ptr[int32](1),
			}}},
			// The rule's implicit SNAT would give the control-plane VMs TCP
			// only, from default port allocation; it is off, and an outbound
			// rule gives them every protocol (CAPZ's getLoadBalancingRules
			// and getOutboundRules, same file; load-balancer-outbound-connections.md).
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("apiserver"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(spec.Port), BackendPort: to.Ptr(spec.Port),
				IdleTimeoutInMinutes: to.Ptr[int32](4), EnableFloatingIP: to.Ptr(false), DisableOutboundSnat: to.Ptr(true),
				LoadDistribution:        to.Ptr(armnetwork.LoadDistributionDefault),
				FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(spec.FrontendID())},
				BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(spec.BackendPoolID())},
				Probe:                   &armnetwork.SubResource{ID: to.Ptr(spec.ID() + "/probes/" + Probe)},
			}}},
			OutboundRules: []*armnetwork.OutboundRule{{Name: to.Ptr(OutboundRule), Properties: &armnetwork.OutboundRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.LoadBalancerOutboundRuleProtocolAll), IdleTimeoutInMinutes: to.Ptr[int32](4),
				FrontendIPConfigurations: []*armnetwork.SubResource{{ID: to.Ptr(spec.FrontendID())}},
				BackendAddressPool:       &armnetwork.SubResource{ID: to.Ptr(spec.BackendPoolID())},
			}}},
		},
	}
}

// Delete deletes the load balancer.
func (s *Service) Delete(ctx context.Context, rg, name, token string) (string, bool, error) {
	return async.Remove(ctx, s.kind, async.Ref{ResourceGroup: rg, Name: name}, token)
}
