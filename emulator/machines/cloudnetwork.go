package machines

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/machines/cloud"
	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/publicips"
)

// ARMNetwork is the cloud controller's Azure: load balancers and public IPs
// through ARM with the Azure SDK (here the emulator, whose public addresses
// are loopback ones). cfg is read when the first call is made: the
// emulator's endpoint is known only once it runs on the machine runtime.
func ARMNetwork(cfg *endpoint.Config) cloud.Network {
	return &armNetwork{cfg: cfg, lbs: map[string]*loadbalancers.Service{}, ips: map[string]*publicips.Service{}}
}

type armNetwork struct {
	cfg *endpoint.Config
	mu  sync.Mutex
	lbs map[string]*loadbalancers.Service
	ips map[string]*publicips.Service
}

func (a *armNetwork) lbService(sub string) (*loadbalancers.Service, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.lbs[sub]; s != nil {
		return s, nil
	}
	s, err := loadbalancers.New(sub, *a.cfg)
	if err == nil {
		a.lbs[sub] = s
	}
	return s, err
}

func (a *armNetwork) ipService(sub string) (*publicips.Service, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.ips[sub]; s != nil {
		return s, nil
	}
	s, err := publicips.New(sub, *a.cfg)
	if err == nil {
		a.ips[sub] = s
	}
	return s, err
}

// azureError is Azure's answer in a line a Service's event can carry: what
// was asked, Azure's code and message.
func azureError(what string, err error) error {
	if err == nil {
		return nil
	}
	if code := async.Code(err); code != "" {
		return fmt.Errorf("%s: Azure answered %s: %s", what, code, async.Message(err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// run drives a non-blocking ARM operation to its end.
func run(ctx context.Context, step func(token string) (string, bool, error)) error {
	token := ""
	for {
		next, done, err := step(token)
		if err != nil || done {
			return err
		}
		token = next
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *armNetwork) EnsurePublicIP(ctx context.Context, ref cloud.Ref, location string, tags map[string]string) (string, string, error) {
	s, err := a.ipService(ref.SubscriptionID)
	if err != nil {
		return "", "", err
	}
	t := map[string]*string{}
	for k, v := range tags {
		t[k] = to.Ptr(v)
	}
	spec := publicips.Spec{ResourceGroup: ref.ResourceGroup, Name: ref.Name, Location: location, Tags: t}
	if err := run(ctx, func(tok string) (string, bool, error) { return s.Reconcile(ctx, spec, tok) }); err != nil {
		return "", "", azureError("creating public IP "+ref.Name, err)
	}
	ip, err := s.Get(ctx, ref.ResourceGroup, ref.Name)
	if err != nil {
		return "", "", err
	}
	if ip == nil || ip.ID == nil || ip.Properties == nil || ip.Properties.IPAddress == nil {
		return "", "", fmt.Errorf("public IP %s has no address", ref.Name)
	}
	return *ip.ID, *ip.Properties.IPAddress, nil
}

func (a *armNetwork) DeletePublicIP(ctx context.Context, ref cloud.Ref) error {
	s, err := a.ipService(ref.SubscriptionID)
	if err != nil {
		return err
	}
	return azureError("deleting public IP "+ref.Name, run(ctx, func(tok string) (string, bool, error) { return s.Delete(ctx, ref.ResourceGroup, ref.Name, tok) }))
}

func (a *armNetwork) DeleteLoadBalancer(ctx context.Context, ref cloud.Ref) error {
	s, err := a.lbService(ref.SubscriptionID)
	if err != nil {
		return err
	}
	return azureError("deleting load balancer "+ref.Name, run(ctx, func(tok string) (string, bool, error) { return s.Delete(ctx, ref.ResourceGroup, ref.Name, tok) }))
}

func (a *armNetwork) LoadBalancer(ctx context.Context, ref cloud.Ref) (*cloud.LoadBalancer, error) {
	s, err := a.lbService(ref.SubscriptionID)
	if err != nil {
		return nil, err
	}
	lb, err := s.Get(ctx, ref.ResourceGroup, ref.Name)
	if err != nil || lb == nil {
		return nil, azureError("reading load balancer "+ref.Name, err)
	}
	return fromARM(ref, lb), nil
}

// PutLoadBalancer starts from the load balancer as ARM has it, so that
// whatever the model does not describe (inbound NAT and outbound rules,
// tags, properties of parts it does not set) is put back unchanged.
func (a *armNetwork) PutLoadBalancer(ctx context.Context, lb *cloud.LoadBalancer) error {
	s, err := a.lbService(lb.SubscriptionID)
	if err != nil {
		return err
	}
	cur, err := s.Get(ctx, lb.ResourceGroup, lb.Name)
	if err != nil {
		return azureError("reading load balancer "+lb.Name, err)
	}
	m := toARM(lb, cur)
	return azureError("putting load balancer "+lb.Name, run(ctx, func(tok string) (string, bool, error) { return s.Put(ctx, lb.ResourceGroup, lb.Name, m, tok) }))
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// lastSegment is the name at the end of a sub-resource's ID.
func lastSegment(r *armnetwork.SubResource) string {
	if r == nil || r.ID == nil {
		return ""
	}
	return (*r.ID)[strings.LastIndex(*r.ID, "/")+1:]
}

func fromARM(ref cloud.Ref, lb *armnetwork.LoadBalancer) *cloud.LoadBalancer {
	out := &cloud.LoadBalancer{Ref: ref, Location: deref(lb.Location)}
	p := lb.Properties
	if p == nil {
		return out
	}
	for _, f := range p.FrontendIPConfigurations {
		fe := cloud.Frontend{Name: deref(f.Name)}
		if fp := f.Properties; fp != nil {
			if fp.PublicIPAddress != nil {
				fe.PublicIPID = deref(fp.PublicIPAddress.ID)
			}
			if fp.Subnet != nil {
				fe.SubnetID = deref(fp.Subnet.ID)
			}
			fe.PrivateIP = deref(fp.PrivateIPAddress)
		}
		out.Frontends = append(out.Frontends, fe)
	}
	for _, bp := range p.BackendAddressPools {
		pool := cloud.Pool{Name: deref(bp.Name)}
		if pp := bp.Properties; pp != nil {
			if pp.VirtualNetwork != nil {
				pool.VNetID = deref(pp.VirtualNetwork.ID)
			}
			for _, ad := range pp.LoadBalancerBackendAddresses {
				if ad.Properties != nil && ad.Properties.IPAddress != nil {
					pool.Addresses = append(pool.Addresses, cloud.PoolAddress{Name: deref(ad.Name), IP: *ad.Properties.IPAddress})
				}
			}
		}
		out.Pools = append(out.Pools, pool)
	}
	for _, pr := range p.Probes {
		probe := cloud.Probe{Name: deref(pr.Name)}
		if pp := pr.Properties; pp != nil {
			probe.Protocol, probe.Path = string(deref(pp.Protocol)), deref(pp.RequestPath)
			probe.Port, probe.Interval, probe.Threshold = deref(pp.Port), deref(pp.IntervalInSeconds), deref(pp.ProbeThreshold)
		}
		out.Probes = append(out.Probes, probe)
	}
	for _, r := range p.LoadBalancingRules {
		rule := cloud.Rule{Name: deref(r.Name)}
		if rp := r.Properties; rp != nil {
			rule.Frontend, rule.Pool, rule.Probe = lastSegment(rp.FrontendIPConfiguration), lastSegment(rp.BackendAddressPool), lastSegment(rp.Probe)
			rule.Protocol, rule.LoadDistribution = string(deref(rp.Protocol)), string(deref(rp.LoadDistribution))
			rule.FrontendPort, rule.BackendPort, rule.IdleTimeoutMinutes = deref(rp.FrontendPort), deref(rp.BackendPort), deref(rp.IdleTimeoutInMinutes)
			rule.FloatingIP, rule.TCPReset, rule.DisableOutboundSNAT = deref(rp.EnableFloatingIP), deref(rp.EnableTCPReset), deref(rp.DisableOutboundSnat)
		}
		out.Rules = append(out.Rules, rule)
	}
	return out
}

func byName[T any](items []*T, name func(*T) *string) map[string]*T {
	m := map[string]*T{}
	for _, it := range items {
		m[strings.ToLower(deref(name(it)))] = it
	}
	return m
}

// toARM builds the load balancer to PUT: cur (nil when new) with its
// frontends, pools, probes and rules replaced by lb's, each part starting
// from the current one of the same name.
func toARM(lb *cloud.LoadBalancer, cur *armnetwork.LoadBalancer) armnetwork.LoadBalancer {
	m := armnetwork.LoadBalancer{Location: to.Ptr(lb.Location),
		SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard), Tier: to.Ptr(armnetwork.LoadBalancerSKUTierRegional)}}
	if cur != nil {
		m = *cur
		m.Etag, m.ID, m.Name, m.Type = nil, nil, nil, nil
	}
	if m.Properties == nil {
		m.Properties = &armnetwork.LoadBalancerPropertiesFormat{}
	}
	p := m.Properties
	id := lb.ID("Microsoft.Network/loadBalancers")
	sub := func(kind, name string) *armnetwork.SubResource {
		return &armnetwork.SubResource{ID: to.Ptr(id + "/" + kind + "/" + name)}
	}

	old := byName(p.FrontendIPConfigurations, func(f *armnetwork.FrontendIPConfiguration) *string { return f.Name })
	p.FrontendIPConfigurations = nil
	for _, f := range lb.Frontends {
		fe := &armnetwork.FrontendIPConfiguration{Name: to.Ptr(f.Name), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{}}
		if o := old[strings.ToLower(f.Name)]; o != nil && o.Properties != nil {
			props := *o.Properties
			fe.Properties, fe.Zones = &props, o.Zones
		}
		fp := fe.Properties
		fp.PublicIPAddress, fp.Subnet = nil, nil
		// References Azure computes are not sent back.
		fp.InboundNatPools, fp.InboundNatRules, fp.LoadBalancingRules, fp.OutboundRules, fp.ProvisioningState = nil, nil, nil, nil, nil
		if f.PublicIPID != "" {
			fp.PublicIPAddress = &armnetwork.PublicIPAddress{ID: to.Ptr(f.PublicIPID)}
			fp.PrivateIPAddress, fp.PrivateIPAllocationMethod = nil, nil
		}
		if f.SubnetID != "" {
			fp.Subnet = &armnetwork.Subnet{ID: to.Ptr(f.SubnetID)}
			fp.PrivateIPAllocationMethod = to.Ptr(armnetwork.IPAllocationMethodDynamic)
			fp.PrivateIPAddress = nil
			if f.PrivateIP != "" {
				fp.PrivateIPAddress = to.Ptr(f.PrivateIP)
			}
		}
		p.FrontendIPConfigurations = append(p.FrontendIPConfigurations, fe)
	}

	oldPools := byName(p.BackendAddressPools, func(b *armnetwork.BackendAddressPool) *string { return b.Name })
	p.BackendAddressPools = nil
	for _, pl := range lb.Pools {
		bp := &armnetwork.BackendAddressPool{Name: to.Ptr(pl.Name), Properties: &armnetwork.BackendAddressPoolPropertiesFormat{}}
		if o := oldPools[strings.ToLower(pl.Name)]; o != nil && o.Properties != nil {
			props := *o.Properties
			bp.Properties = &props
		}
		pp := bp.Properties
		if pl.VNetID != "" {
			pp.VirtualNetwork = &armnetwork.SubResource{ID: to.Ptr(pl.VNetID)}
		}
		pp.BackendIPConfigurations, pp.LoadBalancingRules, pp.OutboundRule, pp.OutboundRules, pp.InboundNatRules, pp.ProvisioningState = nil, nil, nil, nil, nil, nil
		if pl.VNetID != "" || len(pl.Addresses) > 0 {
			pp.LoadBalancerBackendAddresses = []*armnetwork.LoadBalancerBackendAddress{}
			// The virtual network is named on the pool, not on each
			// address, as cloud-provider-azure writes it.
			for _, ad := range pl.Addresses {
				pp.LoadBalancerBackendAddresses = append(pp.LoadBalancerBackendAddresses, &armnetwork.LoadBalancerBackendAddress{
					Name: to.Ptr(ad.Name), Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr(ad.IP)},
				})
			}
		}
		p.BackendAddressPools = append(p.BackendAddressPools, bp)
	}

	p.Probes = nil
	for _, pr := range lb.Probes {
		pp := &armnetwork.ProbePropertiesFormat{Protocol: to.Ptr(armnetwork.ProbeProtocol(pr.Protocol)), Port: to.Ptr(pr.Port),
			IntervalInSeconds: to.Ptr(pr.Interval), ProbeThreshold: to.Ptr(pr.Threshold), NumberOfProbes: to.Ptr(pr.Threshold)}
		if pr.Path != "" {
			pp.RequestPath = to.Ptr(pr.Path)
		}
		p.Probes = append(p.Probes, &armnetwork.Probe{Name: to.Ptr(pr.Name), Properties: pp})
	}

	p.LoadBalancingRules = nil
	for _, r := range lb.Rules {
		rp := &armnetwork.LoadBalancingRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocol(r.Protocol)), FrontendPort: to.Ptr(r.FrontendPort), BackendPort: to.Ptr(r.BackendPort),
			EnableFloatingIP: to.Ptr(r.FloatingIP), EnableTCPReset: to.Ptr(r.TCPReset), DisableOutboundSnat: to.Ptr(r.DisableOutboundSNAT),
			LoadDistribution: to.Ptr(armnetwork.LoadDistribution(r.LoadDistribution)), IdleTimeoutInMinutes: to.Ptr(r.IdleTimeoutMinutes),
			FrontendIPConfiguration: sub("frontendIPConfigurations", r.Frontend),
		}
		if r.Pool != "" {
			rp.BackendAddressPool = sub("backendAddressPools", r.Pool)
		}
		if r.Probe != "" {
			rp.Probe = sub("probes", r.Probe)
		}
		p.LoadBalancingRules = append(p.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr(r.Name), Properties: rp})
	}
	p.ProvisioningState, p.ResourceGUID = nil, nil
	return m
}
