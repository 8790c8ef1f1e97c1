package arm_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// rule is an inbound NSG rule of a table case, in the SDK's terms.
func nsgRule(name string, prio int32, access armnetwork.SecurityRuleAccess, proto armnetwork.SecurityRuleProtocol, src, dst, ports string) *armnetwork.SecurityRule {
	p := &armnetwork.SecurityRulePropertiesFormat{Priority: to.Ptr(prio), Access: to.Ptr(access), Protocol: to.Ptr(proto),
		Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound), SourcePortRange: to.Ptr("*")}
	// Several values go in the plural properties, as cloud-provider-azure
	// writes them.
	if s := strings.Split(src, ","); len(s) > 1 {
		p.SourceAddressPrefixes = to.SliceOfPtrs(s...)
	} else {
		p.SourceAddressPrefix = to.Ptr(src)
	}
	if d := strings.Split(dst, ","); len(d) > 1 {
		p.DestinationAddressPrefixes = to.SliceOfPtrs(d...)
	} else {
		p.DestinationAddressPrefix = to.Ptr(dst)
	}
	if r := strings.Split(ports, ","); len(r) > 1 {
		p.DestinationPortRanges = to.SliceOfPtrs(r...)
	} else {
		p.DestinationPortRange = to.Ptr(ports)
	}
	return &armnetwork.SecurityRule{Name: to.Ptr(name), Properties: p}
}

const (
	allow = armnetwork.SecurityRuleAccessAllow
	deny  = armnetwork.SecurityRuleAccessDeny
	tcp   = armnetwork.SecurityRuleProtocolTCP
	udp   = armnetwork.SecurityRuleProtocolUDP
	anyP  = armnetwork.SecurityRuleProtocolAsterisk
)

type flow struct {
	src  string
	port int
	want bool
}

// TestNSGsFilterLoadBalancedFlows: a load-balancing rule's view of each
// backend carries what the NSGs of the backend's subnet and NIC let in, as
// the emulator holds them after writes through the SDK: rules by priority,
// the first match deciding, then Azure's default rules; both levels must
// allow, and a level without an NSG allows.
func TestNSGsFilterLoadBalancedFlows(t *testing.T) {
	t.Parallel() // its world is its own; the waiting tests leave it time
	w := newWorld(t, nil)
	w.group("rg")
	subnetID := w.network("rg")
	vnetID := subnetID[:strings.Index(subnetID, "/subnets/")]
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	pip := done(pips.BeginCreateOrUpdate(w.ctx, "rg", "web-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	lbs := must(w.net.NewLoadBalancersClient(), nil)
	done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", webLB(*pip.ID, vnetID), nil))
	nics := must(w.net.NewInterfacesClient(), nil)
	nsgs := must(w.net.NewSecurityGroupsClient(), nil)
	subnets := must(w.net.NewSubnetsClient(), nil)
	putNIC := func(nsg *string) string {
		n := armnetwork.Interface{Location: to.Ptr(location), Properties: &armnetwork.InterfacePropertiesFormat{
			IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)},
					LoadBalancerBackendAddressPools: []*armnetwork.BackendAddressPool{{ID: to.Ptr(lbID + "/backendAddressPools/nics")}}}}}}}
		if nsg != nil {
			n.Properties.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: nsg}
		}
		return *done(nics.BeginCreateOrUpdate(w.ctx, "rg", "vm-nic", n, nil)).Properties.IPConfigurations[0].Properties.PrivateIPAddress
	}
	putSubnet := func(nsg *string) {
		sn := armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.1.0/24")}}
		if nsg != nil {
			sn.Properties.NetworkSecurityGroup = &armnetwork.SecurityGroup{ID: nsg}
		}
		done(subnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", "nodes", sn, nil))
	}
	putNSG := func(name string, rules []*armnetwork.SecurityRule) *string {
		return done(nsgs.BeginCreateOrUpdate(w.ctx, "rg", name, armnetwork.SecurityGroup{Location: to.Ptr(location),
			Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: rules}}, nil)).ID
	}
	backend := putNIC(nil)
	// The IP-based pool's addresses have no NIC: their subnet's NSG is
	// theirs.
	const ipBackend = "10.0.1.40"

	client := "127.0.0.1" // outside the VNet: Internet
	cases := []struct {
		name         string
		subnet, nic  []*armnetwork.SecurityRule // nil: no NSG at that level
		subnetNSG    bool
		nicNSG       bool
		flows        []flow
		ipBasedFlows []flow
	}{
		{name: "no NSG at either level: a Standard load balancer's backend is closed, its probes pass", flows: []flow{{client, 30080, false}, {"168.63.129.16", 31000, true}}, ipBasedFlows: []flow{{client, 30443, false}}},
		{name: "default rules only: the Internet is denied, the VNet and the probe source allowed", subnetNSG: true,
			flows: []flow{{client, 30080, false}, {"10.0.0.7", 30080, true}, {"168.63.129.16", 31000, true}}},
		{name: "allow by service tag Internet on the backend port", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("web", 500, allow, tcp, "Internet", "*", "30080")},
			flows:  []flow{{client, 30080, true}, {client, 30081, false}, {"10.0.0.7", 30081, true}}},
		{name: "priority order, not listing order: the lower number decides", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("allow-late", 600, allow, tcp, "*", "*", "*"), nsgRule("deny-early", 500, deny, anyP, "127.0.0.0/8", "*", "30000-30100")},
			flows:  []flow{{client, 30080, false}, {client, 30200, true}, {"127.0.0.9", 30080, false}, {"192.0.2.1", 30080, true}}},
		{name: "deny before allow takes even VNet traffic", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("deny-all", 4096, deny, anyP, "*", "*", "*")},
			flows:  []flow{{"10.0.0.7", 30080, false}, {"168.63.129.16", 31000, false}}},
		{name: "source CIDRs (loadBalancerSourceRanges) and port ranges", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("ranges", 500, allow, tcp, "192.0.2.0/24,127.0.0.1/32", "*", "30000-30099,32000")},
			flows:  []flow{{client, 30080, true}, {client, 32000, true}, {client, 30100, false}, {"192.0.2.200", 30099, true}, {"127.0.0.2", 30080, false}}},
		{name: "protocol: a UDP rule does not take TCP flows", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("udp", 500, allow, udp, "*", "*", "*")},
			flows:  []flow{{client, 30080, false}}},
		{name: "destination: the backend's private address (floating IP off)", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("to-backend", 500, allow, tcp, "Internet", "10.0.1.0/24", "*"), nsgRule("to-frontend", 510, allow, tcp, "Internet", *pip.Properties.IPAddress, "*")},
			flows:  []flow{{client, 30080, true}}, ipBasedFlows: []flow{{client, 30443, true}}},
		{name: "destination elsewhere does not match", subnetNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("to-frontend", 500, allow, tcp, "Internet", *pip.Properties.IPAddress, "*")},
			flows:  []flow{{client, 30080, false}}},
		{name: "subnet allows, NIC denies: denied", subnetNSG: true, nicNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("web", 500, allow, tcp, "*", "*", "*")},
			flows:  []flow{{client, 30080, false}, {"10.0.0.7", 30080, true}},
			// The IP-based pool's addresses have no NIC: the subnet decides.
			ipBasedFlows: []flow{{client, 30443, true}}},
		{name: "NIC allows, subnet denies: denied", subnetNSG: true, nicNSG: true,
			nic:   []*armnetwork.SecurityRule{nsgRule("web", 500, allow, tcp, "*", "*", "*")},
			flows: []flow{{client, 30080, false}}},
		{name: "both allow", subnetNSG: true, nicNSG: true,
			subnet: []*armnetwork.SecurityRule{nsgRule("web", 500, allow, tcp, "Internet", "*", "30080")},
			nic:    []*armnetwork.SecurityRule{nsgRule("web", 100, allow, tcp, "127.0.0.0/8", "VirtualNetwork", "*")},
			flows:  []flow{{client, 30080, true}, {"192.0.2.1", 30080, false}}},
		{name: "NIC NSG only: it alone decides (an IP-based pool's address has no NIC, so no NSG)", nicNSG: true,
			nic:          []*armnetwork.SecurityRule{nsgRule("web", 500, allow, tcp, "Internet", "*", "*")},
			flows:        []flow{{client, 30080, true}, {"168.63.129.16", 31000, true}},
			ipBasedFlows: []flow{{client, 30443, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bind(t)
			var subnetNSG, nicNSG *string
			if c.subnetNSG {
				subnetNSG = putNSG("subnet-nsg", c.subnet)
			}
			if c.nicNSG {
				nicNSG = putNSG("nic-nsg", c.nic)
			}
			putSubnet(subnetNSG)
			putNIC(nicNSG)
			rules := w.srv.LoadBalancingRules()
			if len(rules) != 2 {
				t.Fatalf("%d rules, want 2", len(rules))
			}
			check := func(r arm.LBRule, ip string, flows []flow) {
				in, ok := r.Admission[ip]
				if !ok {
					t.Fatalf("rule %s has no admission for backend %s: %v", r.ID, ip, r.Admission)
				}
				for _, f := range flows {
					if got := in.Admits(netip.MustParseAddr(f.src), f.port); got != f.want {
						t.Errorf("rule %s, backend %s: flow from %s to port %d admitted %v, want %v", r.ID, ip, f.src, f.port, got, f.want)
					}
				}
			}
			check(rules[0], backend, c.flows)
			check(rules[1], ipBackend, c.ipBasedFlows)
		})
	}

	// With floating IP the NSGs see the frontend's address.
	putSubnet(putNSG("subnet-nsg", []*armnetwork.SecurityRule{nsgRule("to-frontend", 500, allow, tcp, "Internet", *pip.Properties.IPAddress, "*")}))
	putNIC(nil)
	floating := webLB(*pip.ID, vnetID)
	floating.Properties.LoadBalancingRules[0].Properties.EnableFloatingIP = to.Ptr(true)
	done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "web", floating, nil))
	r := w.srv.LoadBalancingRules()[0]
	if in := r.Admission[backend]; in == nil || in.Destination != netip.MustParseAddr(*pip.Properties.IPAddress) || !in.Admits(netip.MustParseAddr(client), 30080) {
		t.Errorf("floating IP rule: admission %+v, want the frontend %s as destination, admitted", in, *pip.Properties.IPAddress)
	}
}

// TestNSGRuleWritesReprogramTheDataPlane: deleting an NSG's rule through
// the SDK's SecurityRulesClient, and putting it back, reach the data
// plane.
func TestNSGRuleWritesReprogramTheDataPlane(t *testing.T) {
	var dp *dataPlane
	w := newWorld(t, func(o *arm.Options) {
		dp = &dataPlane{RecordingRuntime: o.Runtime.(*arm.RecordingRuntime)}
		o.Runtime = dp
	})
	w.group("rg")
	subnetID := w.network("rg")
	vnetID := subnetID[:strings.Index(subnetID, "/subnets/")]
	nsgs := must(w.net.NewSecurityGroupsClient(), nil)
	nsg := done(nsgs.BeginCreateOrUpdate(w.ctx, "rg", "node-nsg", armnetwork.SecurityGroup{Location: to.Ptr(location),
		Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: []*armnetwork.SecurityRule{nsgRule("https", 500, allow, tcp, "Internet", "*", "30443")}}}, nil))
	done(must(w.net.NewSubnetsClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "vnet", "nodes", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{
		AddressPrefix: to.Ptr("10.0.1.0/24"), NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: nsg.ID}}}, nil))
	pip := done(must(w.net.NewPublicIPAddressesClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "web-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	done(must(w.net.NewLoadBalancersClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "web", webLB(*pip.ID, vnetID), nil))
	client := netip.MustParseAddr("127.0.0.1")
	admitted := func() (bool, bool) {
		_, last := dp.rules()
		for _, r := range last {
			if strings.HasSuffix(r.ID, "/https") {
				in, ok := r.Admission["10.0.1.40"]
				return ok && in.Admits(client, 30443), true
			}
		}
		return false, false
	}
	wait := func(want bool) {
		t.Helper()
		poll.Until(t, 10*time.Second, func() string {
			if got, ok := admitted(); !ok || got != want {
				return "the data plane does not yet carry the NSG as it is"
			}
			return ""
		})
	}
	wait(true)
	rules := must(w.net.NewSecurityRulesClient(), nil)
	done(rules.BeginDelete(w.ctx, "rg", "node-nsg", "https", nil))
	wait(false)
	done(rules.BeginCreateOrUpdate(w.ctx, "rg", "node-nsg", "https", *nsgRule("https", 500, allow, tcp, "Internet", "*", "30443"), nil))
	wait(true)
}
