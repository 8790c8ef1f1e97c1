package arm_test

import (
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

const lbID = "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/web"

func lbRef(part, name string) *armnetwork.SubResource {
	return &armnetwork.SubResource{ID: to.Ptr(lbID + "/" + part + "/" + name)}
}

// webLB is a Standard public load balancer with a NIC-based pool, an
// IP-based pool, an HTTP and a TCP probe and two rules: valid as it is.
func webLB(pipID, vnetID string) armnetwork.LoadBalancer {
	return armnetwork.LoadBalancer{
		Location: to.Ptr(location),
		SKU:      &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("fe"), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{
				PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(pipID)}}}},
			BackendAddressPools: []*armnetwork.BackendAddressPool{
				{Name: to.Ptr("nics")},
				{Name: to.Ptr("ips"), Properties: &armnetwork.BackendAddressPoolPropertiesFormat{LoadBalancerBackendAddresses: []*armnetwork.LoadBalancerBackendAddress{
					{Name: to.Ptr("a"), Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr("10.0.1.40"), VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr(vnetID)}}},
					{Name: to.Ptr("b"), Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{IPAddress: to.Ptr("10.0.1.41"), VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr(vnetID)}}},
				}}},
			},
			Probes: []*armnetwork.Probe{
				{Name: to.Ptr("healthz"), Properties: &armnetwork.ProbePropertiesFormat{Protocol: to.Ptr(armnetwork.ProbeProtocolHTTP), Port: to.Ptr[int32](31000),
					RequestPath: to.Ptr("/healthz"), IntervalInSeconds: to.Ptr[int32](5), ProbeThreshold: to.Ptr[int32](2)}},
				{Name: to.Ptr("tcp"), Properties: &armnetwork.ProbePropertiesFormat{Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](30443)}},
			},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{
				{Name: to.Ptr("http"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
					Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](80), BackendPort: to.Ptr[int32](30080),
					EnableFloatingIP: to.Ptr(false), LoadDistribution: to.Ptr(armnetwork.LoadDistributionSourceIP),
					FrontendIPConfiguration: lbRef("frontendIPConfigurations", "fe"), BackendAddressPool: lbRef("backendAddressPools", "nics"), Probe: lbRef("probes", "healthz")}},
				{Name: to.Ptr("https"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
					Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](443), BackendPort: to.Ptr[int32](30443),
					FrontendIPConfiguration: lbRef("frontendIPConfigurations", "fe"), BackendAddressPool: lbRef("backendAddressPools", "ips"), Probe: lbRef("probes", "tcp")}},
			},
		},
	}
}

// TestLoadBalancerPartsValidatedAsAzure: what Azure refuses in a load
// balancer's probes, pools and rules, the emulator refuses with Azure's
// code.
func TestLoadBalancerPartsValidatedAsAzure(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	w.network("rg")
	vnetID := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet"
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	pip := done(pips.BeginCreateOrUpdate(w.ctx, "rg", "web-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	lbs := must(w.net.NewLoadBalancersClient(), nil)
	props := func(lb *armnetwork.LoadBalancer) *armnetwork.LoadBalancerPropertiesFormat { return lb.Properties }
	rule := func(lb *armnetwork.LoadBalancer, i int) *armnetwork.LoadBalancingRulePropertiesFormat {
		return lb.Properties.LoadBalancingRules[i].Properties
	}
	probe := func(lb *armnetwork.LoadBalancer, i int) *armnetwork.ProbePropertiesFormat {
		return lb.Properties.Probes[i].Properties
	}
	cases := []struct {
		name, code string
		mutate     func(lb *armnetwork.LoadBalancer)
	}{
		{"a rule's probe that does not exist", "InvalidResourceReference", func(lb *armnetwork.LoadBalancer) { rule(lb, 0).Probe = lbRef("probes", "nope") }},
		{"a rule's pool that does not exist", "InvalidResourceReference", func(lb *armnetwork.LoadBalancer) {
			rule(lb, 0).BackendAddressPool = lbRef("backendAddressPools", "nope")
		}},
		{"a rule without frontend", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { rule(lb, 0).FrontendIPConfiguration = nil }},
		{"a rule's protocol", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { rule(lb, 0).Protocol = to.Ptr(armnetwork.TransportProtocol("Sctp")) }},
		{"a frontend port above 65534", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { rule(lb, 0).FrontendPort = to.Ptr[int32](65535) }},
		{"a negative backend port", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { rule(lb, 0).BackendPort = to.Ptr[int32](-1) }},
		{"an idle timeout above 30 minutes", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { rule(lb, 0).IdleTimeoutInMinutes = to.Ptr[int32](31) }},
		{"a distribution mode", "InvalidParameter", func(lb *armnetwork.LoadBalancer) {
			rule(lb, 0).LoadDistribution = to.Ptr(armnetwork.LoadDistribution("RoundRobin"))
		}},
		{"a frontend port used twice on one frontend and protocol", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { rule(lb, 1).FrontendPort = to.Ptr[int32](80) }},
		{"a frontend port used by an All rule and a Tcp one", "InvalidParameter", func(lb *armnetwork.LoadBalancer) {
			rule(lb, 1).FrontendPort, rule(lb, 1).Protocol = to.Ptr[int32](80), to.Ptr(armnetwork.TransportProtocolAll)
		}},
		{"two rules without floating IP on one pool, protocol and backend port", "RulesUseSameBackendPortProtocolAndPool", func(lb *armnetwork.LoadBalancer) {
			rule(lb, 1).BackendPort, rule(lb, 1).BackendAddressPool = to.Ptr[int32](30080), lbRef("backendAddressPools", "nics")
		}},
		{"an outbound rule on a rule's frontend while the rule keeps its SNAT", "LoadBalancingRuleMustDisableSNATSinceSameFrontendIPConfigurationIsReferencedByOutboundRule", func(lb *armnetwork.LoadBalancer) {
			props(lb).OutboundRules = []*armnetwork.OutboundRule{{Name: to.Ptr("out"), Properties: &armnetwork.OutboundRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.LoadBalancerOutboundRuleProtocolAll), BackendAddressPool: lbRef("backendAddressPools", "nics"),
				FrontendIPConfigurations: []*armnetwork.SubResource{lbRef("frontendIPConfigurations", "fe")}}}}
		}},
		{"an outbound rule's pool that does not exist", "InvalidResourceReference", func(lb *armnetwork.LoadBalancer) {
			rule(lb, 0).DisableOutboundSnat, rule(lb, 1).DisableOutboundSnat = to.Ptr(true), to.Ptr(true)
			props(lb).OutboundRules = []*armnetwork.OutboundRule{{Name: to.Ptr("out"), Properties: &armnetwork.OutboundRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.LoadBalancerOutboundRuleProtocolAll), BackendAddressPool: lbRef("backendAddressPools", "nope"),
				FrontendIPConfigurations: []*armnetwork.SubResource{lbRef("frontendIPConfigurations", "fe")}}}}
		}},
		{"a probe's protocol", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { probe(lb, 1).Protocol = to.Ptr(armnetwork.ProbeProtocol("Icmp")) }},
		{"a probe's port 0", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { probe(lb, 1).Port = to.Ptr[int32](0) }},
		{"a probe's port above 65535", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { probe(lb, 1).Port = to.Ptr[int32](65536) }},
		{"a probe interval under 5 seconds", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { probe(lb, 1).IntervalInSeconds = to.Ptr[int32](4) }},
		{"an Http probe without requestPath", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { probe(lb, 0).RequestPath = nil }},
		{"a Tcp probe with a requestPath", "InvalidParameter", func(lb *armnetwork.LoadBalancer) { probe(lb, 1).RequestPath = to.Ptr("/") }},
		{"an IP-based pool member that is no address", "InvalidParameter", func(lb *armnetwork.LoadBalancer) {
			props(lb).BackendAddressPools[1].Properties.LoadBalancerBackendAddresses[0].Properties.IPAddress = to.Ptr("10.0.1")
		}},
		{"an IP-based pool member in a VNet that does not exist", "InvalidResourceReference", func(lb *armnetwork.LoadBalancer) {
			props(lb).BackendAddressPools[1].Properties.LoadBalancerBackendAddresses[0].Properties.VirtualNetwork.ID = to.Ptr(vnetID + "-gone")
		}},
		{"an IP-based pool member with no VNet, on the pool or its own", "InvalidParameter", func(lb *armnetwork.LoadBalancer) {
			props(lb).BackendAddressPools[1].Properties.LoadBalancerBackendAddresses[0].Properties.VirtualNetwork = nil
		}},
		{"an IP-based pool whose own VNet does not exist", "InvalidResourceReference", func(lb *armnetwork.LoadBalancer) {
			props(lb).BackendAddressPools[1].Properties.VirtualNetwork = &armnetwork.SubResource{ID: to.Ptr(vnetID + "-gone")}
		}},
		{"an IP-based pool on a Basic load balancer", "InvalidParameter", func(lb *armnetwork.LoadBalancer) {
			lb.SKU.Name = to.Ptr(armnetwork.LoadBalancerSKUNameBasic)
			props(lb).FrontendIPConfigurations[0].Properties = &armnetwork.FrontendIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(vnetID + "/subnets/nodes")}}
		}},
		{"a Basic load balancer on a Standard public IP", "DifferentSkuLoadBalancersAndPublicIPAddressNotAllowed", func(lb *armnetwork.LoadBalancer) { lb.SKU = nil }},
		{"pools and rules without a frontend", "LoadBalancerWithoutFrontendIPCantHaveChildResources", func(lb *armnetwork.LoadBalancer) {
			props(lb).FrontendIPConfigurations = nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bind(t)
			lb := webLB(*pip.ID, vnetID)
			c.mutate(&lb)
			azureCode(t, pollErr(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", lb, nil)), c.code)
		})
	}
	// The VNet may be the pool's rather than each address's, as
	// cloud-provider-azure writes it.
	poolVNet := webLB(*pip.ID, vnetID)
	ips := poolVNet.Properties.BackendAddressPools[1].Properties
	ips.VirtualNetwork = &armnetwork.SubResource{ID: to.Ptr(vnetID)}
	for _, a := range ips.LoadBalancerBackendAddresses {
		a.Properties.VirtualNetwork = nil
	}
	done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", poolVNet, nil))
	// Unchanged, it is valid; and Azure's defaults are filled in.
	lb := done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", webLB(*pip.ID, vnetID), nil))
	https := lb.Properties.LoadBalancingRules[1].Properties
	if *https.IdleTimeoutInMinutes != 4 || *https.LoadDistribution != armnetwork.LoadDistributionDefault || *https.EnableFloatingIP {
		t.Errorf("rule defaults: idle %d, distribution %s, floating IP %v; want 4, Default, false", *https.IdleTimeoutInMinutes, *https.LoadDistribution, *https.EnableFloatingIP)
	}
	if got := *lb.Properties.Probes[1].Properties.IntervalInSeconds; got != 15 {
		t.Errorf("probe interval default %d, want 15", got)
	}
}

// dataPlane is a runtime that also carries traffic: it records the rules
// the emulator programs.
type dataPlane struct {
	*arm.RecordingRuntime
	mu    sync.Mutex
	calls int
	last  []arm.LBRule
}

func (d *dataPlane) ProgramLoadBalancers(rules []arm.LBRule) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	d.last = rules
}

func (d *dataPlane) rules() (int, []arm.LBRule) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls, d.last
}

// TestLoadBalancingRulesView: the data plane sees each rule with its
// frontend's address, its probe and its pool's members (VM NICs, scale-set
// instances' NICs, or IP addresses), and is told after every change.
func TestLoadBalancingRulesView(t *testing.T) {
	var dp *dataPlane
	w := newWorld(t, func(o *arm.Options) {
		dp = &dataPlane{RecordingRuntime: o.Runtime.(*arm.RecordingRuntime)}
		o.Runtime = dp
	})
	w.group("rg")
	subnetID := w.network("rg")
	vnetID := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet"
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	pip := done(pips.BeginCreateOrUpdate(w.ctx, "rg", "web-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	lbs := must(w.net.NewLoadBalancersClient(), nil)
	done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", webLB(*pip.ID, vnetID), nil))

	// A VM's NIC and a scale set's instances join the NIC-based pool.
	nics := must(w.net.NewInterfacesClient(), nil)
	nic := done(nics.BeginCreateOrUpdate(w.ctx, "rg", "vm-nic", armnetwork.Interface{
		Location: to.Ptr(location),
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name: to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)},
				LoadBalancerBackendAddressPools: []*armnetwork.BackendAddressPool{{ID: to.Ptr(lbID + "/backendAddressPools/nics")}}},
		}}},
	}, nil))
	vmss := scaleSet(subnetID, "win", "", 2)
	ipc := vmss.Properties.VirtualMachineProfile.NetworkProfile.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0].Properties
	ipc.LoadBalancerBackendAddressPools = []*armcompute.SubResource{{ID: to.Ptr(lbID + "/backendAddressPools/nics")}}
	sets := must(w.compute.NewVirtualMachineScaleSetsClient(), nil)
	done(sets.BeginCreateOrUpdate(w.ctx, "rg", "win", vmss, nil))
	want := []string{*nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress}
	instNICs := must(w.net.NewInterfacesClient(), nil).NewListVirtualMachineScaleSetNetworkInterfacesPager("rg", "win", nil)
	for instNICs.More() {
		for _, n := range must(instNICs.NextPage(w.ctx)).Value {
			want = append(want, *n.Properties.IPConfigurations[0].Properties.PrivateIPAddress)
		}
	}
	sort.Strings(want)
	if len(want) != 3 {
		t.Fatalf("pool members %v, want the VM's NIC and two instances'", want)
	}

	rules := w.srv.LoadBalancingRules()
	if len(rules) != 2 {
		t.Fatalf("%d rules, want 2: %v", len(rules), rules)
	}
	http, https := rules[0], rules[1]
	if http.ID != lbID+"/loadBalancingRules/http" || http.FrontendIP != *pip.Properties.IPAddress || http.FrontendPrivate ||
		http.FrontendPort != 80 || http.BackendPort != 30080 || http.Protocol != "Tcp" || http.FloatingIP ||
		http.Distribution != "SourceIP" || http.IdleTimeout != 4*time.Minute {
		t.Errorf("rule http: %+v", http)
	}
	if p := http.Probe; p == nil || *p != (arm.LBProbe{Protocol: "Http", Port: 31000, Path: "/healthz", Interval: 5 * time.Second, Threshold: 2}) {
		t.Errorf("rule http's probe: %+v", p)
	}
	if !reflect.DeepEqual(http.Backends, want) {
		t.Errorf("rule http's backends %v, want %v", http.Backends, want)
	}
	// numberOfProbes is not what Azure honours: without probeThreshold one
	// failure takes a backend out.
	if p := https.Probe; p == nil || *p != (arm.LBProbe{Protocol: "Tcp", Port: 30443, Interval: 15 * time.Second, Threshold: 1}) {
		t.Errorf("rule https's probe: %+v", p)
	}
	if strings.Join(https.Backends, ",") != "10.0.1.40,10.0.1.41" || https.Distribution != "Default" {
		t.Errorf("rule https: backends %v, distribution %s", https.Backends, https.Distribution)
	}

	// The runtime was told, and sees the view as it is after each write.
	poll.Until(t, 10*time.Second, func() string {
		if _, last := dp.rules(); !reflect.DeepEqual(last, w.srv.LoadBalancingRules()) {
			return "the data plane has not been programmed with the current rules"
		}
		return ""
	})
	calls, _ := dp.rules()
	done(nics.BeginDelete(w.ctx, "rg", "vm-nic", nil))
	poll.Until(t, 10*time.Second, func() string {
		n, last := dp.rules()
		if n == calls || len(last) != 2 || len(last[0].Backends) != 2 {
			return "the data plane was not reprogrammed without the deleted NIC"
		}
		return ""
	})

	// NIC-based and IP-based members never share a pool.
	err := pollErr(nics.BeginCreateOrUpdate(w.ctx, "rg", "ip-pool-nic", armnetwork.Interface{
		Location: to.Ptr(location),
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name: to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)},
				LoadBalancerBackendAddressPools: []*armnetwork.BackendAddressPool{{ID: to.Ptr(lbID + "/backendAddressPools/ips")}}},
		}}},
	}, nil))
	azureCode(t, err, "InvalidParameter")
	mixed := webLB(*pip.ID, vnetID)
	mixed.Properties.BackendAddressPools[0].Properties = mixed.Properties.BackendAddressPools[1].Properties
	azureCode(t, pollErr(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", mixed, nil)), "InvalidParameter")
	toIPs := scaleSet(subnetID, "lin", "", 1)
	toIPs.Properties.VirtualMachineProfile.NetworkProfile.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0].Properties.LoadBalancerBackendAddressPools =
		[]*armcompute.SubResource{{ID: to.Ptr(lbID + "/backendAddressPools/ips")}}
	azureCode(t, pollErr(sets.BeginCreateOrUpdate(w.ctx, "rg", "lin", toIPs, nil)), "InvalidParameter")

	// A deleted load balancer carries nothing.
	done(sets.BeginDelete(w.ctx, "rg", "win", nil))
	done(lbs.BeginDelete(w.ctx, "rg", "web", nil))
	if rules := w.srv.LoadBalancingRules(); len(rules) != 0 {
		t.Errorf("rules of a deleted load balancer: %v", rules)
	}
}
