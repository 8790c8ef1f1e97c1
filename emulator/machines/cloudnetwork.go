package machines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/machines/cloudprovider"
)

// ARMNetwork is the cloud controllers' Azure: load balancers, public IPs
// and network security groups through ARM with the Azure SDK's armnetwork
// clients, as cloud-provider-azure calls them (here the emulator, whose
// public addresses are loopback ones), authenticated with the credential
// each cluster's cloud config names, as cloud-provider-azure v1.36.5 builds
// it (pkg/azclient/auth_func.go, commit 9da1599): a client secret through
// Entra ID, a managed identity through the IMDS of the VM the controller
// manager runs on. connect is called when the first call is made: the
// emulator's endpoint is known only once it runs on the machine runtime.
func ARMNetwork(connect ARMConnection) func(cloudprovider.Credentials) (cloudprovider.Network, error) {
	var mu sync.Mutex
	nets := map[string]*armNetwork{}
	return func(cr cloudprovider.Credentials) (cloudprovider.Network, error) {
		mu.Lock()
		defer mu.Unlock()
		if n := nets[cr.Key()]; n != nil {
			return n, nil
		}
		cred, opts, err := connect.as(cr)
		if err != nil {
			return nil, err
		}
		n := &armNetwork{cred: cred, opts: opts, clients: map[string]*armnetwork.ClientFactory{}}
		nets[cr.Key()] = n
		return n, nil
	}
}

// ARMConnection gives the client options that reach ARM (its endpoint,
// Entra ID's authority host, the transport that trusts them) and, for an
// emulator that takes one static token (tests not about identity), the
// credential every cloud controller then uses whatever its cloud config
// says; nil means each cloud config's own.
type ARMConnection func() (azcore.TokenCredential, *arm.ClientOptions, error)

// as connects with the world's credential, or, where the world gives
// none, with the one cr's cloud config names.
func (connect ARMConnection) as(cr cloudprovider.Credentials) (azcore.TokenCredential, *arm.ClientOptions, error) {
	cred, opts, err := connect()
	if err == nil && cred == nil {
		cred, err = cloudConfigCredential(cr, opts)
	}
	return cred, opts, err
}

// cloudConfigCredential is the credential cr names.
func cloudConfigCredential(cr cloudprovider.Credentials, opts *arm.ClientOptions) (azcore.TokenCredential, error) {
	if cr.ManagedIdentity {
		if cr.IMDS == "" {
			return nil, fmt.Errorf("the cloud config %s on node %s asks for a managed identity, and this world has no Instance Metadata Service to issue one (it runs without an Entra ID)", cr.ConfigPath, cr.Node)
		}
		return &imdsCredential{base: cr.IMDS, id: cr.UserAssignedID}, nil
	}
	var co azcore.ClientOptions
	if opts != nil {
		co = opts.ClientOptions
	}
	// The emulated Entra ID serves no instance discovery: the authority is
	// the one in the client options.
	return azidentity.NewClientSecretCredential(cr.TenantID, cr.ClientID, cr.ClientSecret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: co, DisableInstanceDiscovery: true})
}

type armNetwork struct {
	cred    azcore.TokenCredential
	opts    *arm.ClientOptions
	mu      sync.Mutex
	clients map[string]*armnetwork.ClientFactory
}

// client is the subscription's armnetwork client factory, made once.
func (a *armNetwork) client(sub string) (*armnetwork.ClientFactory, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f := a.clients[sub]; f != nil {
		return f, nil
	}
	f, err := armnetwork.NewClientFactory(sub, a.cred, a.opts)
	if err == nil {
		a.clients[sub] = f
	}
	return f, err
}

func notFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// azureError is Azure's answer in a line a Service's event can carry: what
// was asked, Azure's code and message.
func azureError(what string, err error) error {
	if err == nil {
		return nil
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.ErrorCode != "" {
		return fmt.Errorf("%s: Azure answered %s: %s", what, re.ErrorCode, azureMessage(re))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// azureMessage is the message of Azure's error body; the SDK's error text
// (request, response dump) when there is none.
func azureMessage(re *azcore.ResponseError) string {
	if m := errorMessage(re); m != "" {
		return m
	}
	return re.Error()
}

func (a *armNetwork) EnsurePublicIP(ctx context.Context, ref cloudprovider.Ref, location string, tags map[string]string) (string, string, error) {
	f, err := a.client(ref.SubscriptionID)
	if err != nil {
		return "", "", err
	}
	c := f.NewPublicIPAddressesClient()
	cur, err := c.Get(ctx, ref.ResourceGroup, ref.Name, nil)
	switch {
	case notFound(err):
		t := map[string]*string{}
		for k, v := range tags {
			t[k] = to.Ptr(v)
		}
		ip := armnetwork.PublicIPAddress{Location: to.Ptr(location), Tags: t,
			SKU:        &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)},
			Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic)}}
		p, perr := c.BeginCreateOrUpdate(ctx, ref.ResourceGroup, ref.Name, ip, nil)
		if _, err := cloudprovider.Wait(ctx, p, perr); err != nil {
			return "", "", azureError("creating public IP "+ref.Name, err)
		}
		if cur, err = c.Get(ctx, ref.ResourceGroup, ref.Name, nil); err != nil {
			return "", "", azureError("reading public IP "+ref.Name, err)
		}
	case err != nil:
		return "", "", azureError("reading public IP "+ref.Name, err)
	}
	if cur.ID == nil || cur.Properties == nil || cur.Properties.IPAddress == nil {
		return "", "", fmt.Errorf("public IP %s has no address", ref.Name)
	}
	return *cur.ID, *cur.Properties.IPAddress, nil
}

func (a *armNetwork) DeletePublicIP(ctx context.Context, ref cloudprovider.Ref) error {
	f, err := a.client(ref.SubscriptionID)
	if err != nil {
		return err
	}
	p, err := f.NewPublicIPAddressesClient().BeginDelete(ctx, ref.ResourceGroup, ref.Name, nil)
	if _, err := cloudprovider.Wait(ctx, p, err); err != nil && !notFound(err) {
		return azureError("deleting public IP "+ref.Name, err)
	}
	return nil
}

func (a *armNetwork) DeleteLoadBalancer(ctx context.Context, ref cloudprovider.Ref) error {
	f, err := a.client(ref.SubscriptionID)
	if err != nil {
		return err
	}
	p, err := f.NewLoadBalancersClient().BeginDelete(ctx, ref.ResourceGroup, ref.Name, nil)
	if _, err := cloudprovider.Wait(ctx, p, err); err != nil && !notFound(err) {
		return azureError("deleting load balancer "+ref.Name, err)
	}
	return nil
}

// getLB is the load balancer as ARM has it, nil when it does not exist.
func (a *armNetwork) getLB(ctx context.Context, ref cloudprovider.Ref) (*armnetwork.LoadBalancer, error) {
	f, err := a.client(ref.SubscriptionID)
	if err != nil {
		return nil, err
	}
	cur, err := f.NewLoadBalancersClient().Get(ctx, ref.ResourceGroup, ref.Name, nil)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, azureError("reading load balancer "+ref.Name, err)
	}
	return &cur.LoadBalancer, nil
}

func (a *armNetwork) LoadBalancer(ctx context.Context, ref cloudprovider.Ref) (*cloudprovider.LoadBalancer, error) {
	lb, err := a.getLB(ctx, ref)
	if err != nil || lb == nil {
		return nil, err
	}
	return fromARM(ref, lb), nil
}

// PutLoadBalancer starts from the load balancer as ARM has it, so that
// whatever the model does not describe (inbound NAT and outbound rules,
// tags, properties of parts it does not set) is put back unchanged.
func (a *armNetwork) PutLoadBalancer(ctx context.Context, lb *cloudprovider.LoadBalancer) error {
	cur, err := a.getLB(ctx, lb.Ref)
	if err != nil {
		return err
	}
	f, err := a.client(lb.SubscriptionID)
	if err != nil {
		return err
	}
	p, err := f.NewLoadBalancersClient().BeginCreateOrUpdate(ctx, lb.ResourceGroup, lb.Name, toARM(lb, cur), nil)
	_, err = cloudprovider.Wait(ctx, p, err)
	return azureError("putting load balancer "+lb.Name, err)
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

func fromARM(ref cloudprovider.Ref, lb *armnetwork.LoadBalancer) *cloudprovider.LoadBalancer {
	out := &cloudprovider.LoadBalancer{Ref: ref, Location: deref(lb.Location)}
	p := lb.Properties
	if p == nil {
		return out
	}
	for _, f := range p.FrontendIPConfigurations {
		fe := cloudprovider.Frontend{Name: deref(f.Name)}
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
		pool := cloudprovider.Pool{Name: deref(bp.Name)}
		if pp := bp.Properties; pp != nil {
			if pp.VirtualNetwork != nil {
				pool.VNetID = deref(pp.VirtualNetwork.ID)
			}
			for _, ad := range pp.LoadBalancerBackendAddresses {
				if ad.Properties != nil && ad.Properties.IPAddress != nil {
					pool.Addresses = append(pool.Addresses, cloudprovider.PoolAddress{Name: deref(ad.Name), IP: *ad.Properties.IPAddress})
				}
			}
		}
		out.Pools = append(out.Pools, pool)
	}
	for _, pr := range p.Probes {
		probe := cloudprovider.Probe{Name: deref(pr.Name)}
		if pp := pr.Properties; pp != nil {
			probe.Protocol, probe.Path = string(deref(pp.Protocol)), deref(pp.RequestPath)
			probe.Port, probe.Interval, probe.Threshold = deref(pp.Port), deref(pp.IntervalInSeconds), deref(pp.ProbeThreshold)
		}
		out.Probes = append(out.Probes, probe)
	}
	for _, r := range p.LoadBalancingRules {
		rule := cloudprovider.Rule{Name: deref(r.Name)}
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
func toARM(lb *cloudprovider.LoadBalancer, cur *armnetwork.LoadBalancer) armnetwork.LoadBalancer {
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

// errorMessage reads error.message of Azure's error body (of the request,
// or of the operation's status when a long-running one failed).
func errorMessage(re *azcore.ResponseError) string {
	if re.RawResponse == nil || re.RawResponse.Body == nil {
		return ""
	}
	b, err := io.ReadAll(re.RawResponse.Body)
	if err != nil {
		return ""
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) != nil {
		return ""
	}
	return body.Error.Message
}

// SecurityGroup reads the NSG with the SDK's SecurityGroupsClient, as
// cloud-provider-azure's nsgRepo does.
func (a *armNetwork) SecurityGroup(ctx context.Context, ref cloudprovider.Ref) (*cloudprovider.SecurityGroup, error) {
	sg, err := a.getNSG(ctx, ref)
	if err != nil || sg == nil {
		return nil, err
	}
	out := &cloudprovider.SecurityGroup{Ref: ref}
	if sg.Properties == nil {
		return out, nil
	}
	for _, r := range sg.Properties.SecurityRules {
		rule := cloudprovider.SecurityRule{Name: deref(r.Name)}
		if p := r.Properties; p != nil {
			rule.Priority, rule.Protocol, rule.Access, rule.Direction = deref(p.Priority), string(deref(p.Protocol)), string(deref(p.Access)), string(deref(p.Direction))
			rule.SourcePrefix, rule.SourcePrefixes, rule.SourcePortRange = deref(p.SourceAddressPrefix), strs(p.SourceAddressPrefixes), deref(p.SourcePortRange)
			rule.DestinationPrefix, rule.DestinationPrefixes = deref(p.DestinationAddressPrefix), strs(p.DestinationAddressPrefixes)
			rule.DestinationPortRange, rule.DestinationPortRanges = deref(p.DestinationPortRange), strs(p.DestinationPortRanges)
			rule.DestinationASGs = len(p.DestinationApplicationSecurityGroups) > 0
		}
		out.Rules = append(out.Rules, rule)
	}
	return out, nil
}

func (a *armNetwork) getNSG(ctx context.Context, ref cloudprovider.Ref) (*armnetwork.SecurityGroup, error) {
	f, err := a.client(ref.SubscriptionID)
	if err != nil {
		return nil, err
	}
	cur, err := f.NewSecurityGroupsClient().Get(ctx, ref.ResourceGroup, ref.Name, nil)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, azureError("reading network security group "+ref.Name, err)
	}
	return &cur.SecurityGroup, nil
}

// PutSecurityGroup writes the whole NSG with the SecurityGroupsClient, as
// cloud-provider-azure's CreateOrUpdateSecurityGroup does: the NSG as ARM
// has it, its rules replaced by sg's, each starting from the current rule
// of the same name so that what the model does not carry (descriptions,
// application security groups, source port ranges) is put back.
func (a *armNetwork) PutSecurityGroup(ctx context.Context, sg *cloudprovider.SecurityGroup) error {
	cur, err := a.getNSG(ctx, sg.Ref)
	if err != nil {
		return err
	}
	if cur == nil {
		return fmt.Errorf("network security group %s does not exist", sg.Name)
	}
	m := *cur
	m.Etag, m.ID, m.Name, m.Type = nil, nil, nil, nil
	props := armnetwork.SecurityGroupPropertiesFormat{}
	if cur.Properties != nil {
		props = *cur.Properties
	}
	old := byName(props.SecurityRules, func(r *armnetwork.SecurityRule) *string { return r.Name })
	props.SecurityRules = nil
	// What Azure computes or renders is not sent back.
	props.DefaultSecurityRules, props.NetworkInterfaces, props.Subnets, props.FlowLogs, props.ProvisioningState, props.ResourceGUID = nil, nil, nil, nil, nil, nil
	for _, r := range sg.Rules {
		p := &armnetwork.SecurityRulePropertiesFormat{}
		if o := old[strings.ToLower(r.Name)]; o != nil && o.Properties != nil {
			cp := *o.Properties
			p = &cp
		}
		p.ProvisioningState = nil
		p.Priority = to.Ptr(r.Priority)
		p.Protocol = to.Ptr(armnetwork.SecurityRuleProtocol(r.Protocol))
		p.Access = to.Ptr(armnetwork.SecurityRuleAccess(r.Access))
		p.Direction = to.Ptr(armnetwork.SecurityRuleDirection(r.Direction))
		p.SourceAddressPrefix, p.SourceAddressPrefixes = optional(r.SourcePrefix), ptrs(r.SourcePrefixes)
		p.SourcePortRange = optional(r.SourcePortRange)
		p.DestinationAddressPrefix, p.DestinationAddressPrefixes = optional(r.DestinationPrefix), ptrs(r.DestinationPrefixes)
		p.DestinationPortRange, p.DestinationPortRanges = optional(r.DestinationPortRange), ptrs(r.DestinationPortRanges)
		props.SecurityRules = append(props.SecurityRules, &armnetwork.SecurityRule{Name: to.Ptr(r.Name), Properties: p})
	}
	m.Properties = &props
	f, err := a.client(sg.SubscriptionID)
	if err != nil {
		return err
	}
	p, err := f.NewSecurityGroupsClient().BeginCreateOrUpdate(ctx, sg.ResourceGroup, sg.Name, m, nil)
	_, err = cloudprovider.Wait(ctx, p, err)
	return azureError("putting network security group "+sg.Name, err)
}

func strs(ps []*string) []string {
	var out []string
	for _, p := range ps {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

func ptrs(vs []string) []*string {
	if len(vs) == 0 {
		return nil
	}
	return to.SliceOfPtrs(vs...)
}

func optional(v string) *string {
	if v == "" {
		return nil
	}
	return to.Ptr(v)
}
