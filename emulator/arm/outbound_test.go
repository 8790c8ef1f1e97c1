package arm_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
)

// TestOutboundPaths: a machine reaches the internet only through what Azure
// gives it, in Azure's order: the subnet's NAT gateway, the NIC's public
// IP, an outbound rule of its pool, a load-balancing rule's SNAT, and the
// default outbound access of a subnet that asks for it; per protocol.
func TestOutboundPaths(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	net := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/"
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	for _, name := range []string{"vm-ip", "nat-ip", "out-ip", "web-ip"} {
		done(pips.BeginCreateOrUpdate(w.ctx, "rg", name, armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	}
	nats := must(w.net.NewNatGatewaysClient(), nil)
	nat := done(nats.BeginCreateOrUpdate(w.ctx, "rg", "natgw", armnetwork.NatGateway{
		Location: to.Ptr(location), SKU: &armnetwork.NatGatewaySKU{Name: to.Ptr(armnetwork.NatGatewaySKUNameStandard)},
		Properties: &armnetwork.NatGatewayPropertiesFormat{PublicIPAddresses: []*armnetwork.SubResource{{ID: to.Ptr(net + "publicIPAddresses/nat-ip")}}},
	}, nil))
	subnet := func(name, prefix string, nat *string, open bool) *armnetwork.Subnet {
		p := &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr(prefix)}
		if nat != nil {
			p.NatGateway = &armnetwork.SubResource{ID: nat}
		}
		if open {
			p.DefaultOutboundAccess = to.Ptr(true)
		}
		return &armnetwork.Subnet{Name: to.Ptr(name), Properties: p}
	}
	vnet := func(natOnPrivate bool) armnetwork.VirtualNetwork {
		var privateNAT *string
		if natOnPrivate {
			privateNAT = nat.ID
		}
		return armnetwork.VirtualNetwork{Location: to.Ptr(location), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}},
			Subnets: []*armnetwork.Subnet{
				subnet("natted", "10.0.1.0/24", nat.ID, false),
				subnet("private", "10.0.2.0/24", privateNAT, false),
				subnet("open", "10.0.3.0/24", nil, true),
			},
		}}
	}
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	done(vnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", vnet(false), nil))
	sn := func(name string) string { return net + "virtualNetworks/vnet/subnets/" + name }

	// One Standard load balancer: an outbound rule (Tcp only) for pool
	// "out"; a rule with SNAT for pool "web"; a rule with SNAT off for pool
	// "nosnat".
	lbPart := func(part, name string) *armnetwork.SubResource {
		return &armnetwork.SubResource{ID: to.Ptr(net + "loadBalancers/egress/" + part + "/" + name)}
	}
	lbs := must(w.net.NewLoadBalancersClient(), nil)
	done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "egress", armnetwork.LoadBalancer{
		Location: to.Ptr(location), SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{
				{Name: to.Ptr("out"), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(net + "publicIPAddresses/out-ip")}}},
				{Name: to.Ptr("web"), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(net + "publicIPAddresses/web-ip")}}},
			},
			BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr("out")}, {Name: to.Ptr("web")}, {Name: to.Ptr("nosnat")}},
			OutboundRules: []*armnetwork.OutboundRule{{Name: to.Ptr("tcp-out"), Properties: &armnetwork.OutboundRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.LoadBalancerOutboundRuleProtocolTCP), BackendAddressPool: lbPart("backendAddressPools", "out"),
				FrontendIPConfigurations: []*armnetwork.SubResource{lbPart("frontendIPConfigurations", "out")},
			}}},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{
				{Name: to.Ptr("http"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
					Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](80), BackendPort: to.Ptr[int32](80),
					FrontendIPConfiguration: lbPart("frontendIPConfigurations", "web"), BackendAddressPool: lbPart("backendAddressPools", "web")}},
				{Name: to.Ptr("quiet"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
					Protocol: to.Ptr(armnetwork.TransportProtocolAll), FrontendPort: to.Ptr[int32](8080), BackendPort: to.Ptr[int32](8080), DisableOutboundSnat: to.Ptr(true),
					FrontendIPConfiguration: lbPart("frontendIPConfigurations", "web"), BackendAddressPool: lbPart("backendAddressPools", "nosnat")}},
			},
		},
	}, nil))

	nics := must(w.net.NewInterfacesClient(), nil)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	vm := func(name, subnet string, publicIP bool, pools ...string) string {
		p := &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(sn(subnet))}}
		if publicIP {
			p.PublicIPAddress = &armnetwork.PublicIPAddress{ID: to.Ptr(net + "publicIPAddresses/vm-ip")}
		}
		for _, pool := range pools {
			p.LoadBalancerBackendAddressPools = append(p.LoadBalancerBackendAddressPools, &armnetwork.BackendAddressPool{ID: lbPart("backendAddressPools", pool).ID})
		}
		nic := done(nics.BeginCreateOrUpdate(w.ctx, "rg", name+"-nic", armnetwork.Interface{Location: to.Ptr(location),
			Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"), Properties: p}}}}, nil))
		return *done(vms.BeginCreateOrUpdate(w.ctx, "rg", name, linuxVM(*nic.ID, ""), nil)).ID
	}
	ss := scaleSet(sn("private"), "pool", "", 1)
	ipc := ss.Properties.VirtualMachineProfile.NetworkProfile.NetworkInterfaceConfigurations[0].Properties.IPConfigurations[0].Properties
	ipc.LoadBalancerBackendAddressPools = []*armcompute.SubResource{{ID: lbPart("backendAddressPools", "out").ID}}
	done(must(w.compute.NewVirtualMachineScaleSetsClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "pool", ss, nil))
	instance := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/" + w.instances("rg", "pool")[0].id

	none := arm.Egress{}
	natgw := arm.Egress{Via: arm.ViaNATGateway, ID: *nat.ID}
	outRule := arm.Egress{Via: arm.ViaOutboundRule, ID: net + "loadBalancers/egress/outboundRules/tcp-out"}
	cases := []struct {
		name     string
		id       string
		tcp, udp arm.Egress
	}{
		{"NAT gateway wins over public IP and load balancer", vm("natted", "natted", true, "out"), natgw, natgw},
		{"instance public IP wins over outbound rule", vm("public", "private", true, "out"), arm.Egress{Via: arm.ViaPublicIP, ID: net + "publicIPAddresses/vm-ip"}, arm.Egress{Via: arm.ViaPublicIP, ID: net + "publicIPAddresses/vm-ip"}},
		{"outbound rule for Tcp gives no Udp", vm("outbound", "private", false, "out"), outRule, none},
		{"load-balancing rule's SNAT, for its protocol", vm("web", "private", false, "web"), arm.Egress{Via: arm.ViaLoadBalancingRule, ID: net + "loadBalancers/egress/loadBalancingRules/http"}, none},
		{"rule with disableOutboundSnat gives nothing", vm("quiet", "private", false, "nosnat"), none, none},
		{"nothing at all", vm("alone", "private", false), none, none},
		{"subnet that keeps default outbound access", vm("legacy", "open", false), arm.Egress{Via: arm.ViaDefaultOutbound, ID: sn("open")}, arm.Egress{Via: arm.ViaDefaultOutbound, ID: sn("open")}},
		{"scale-set instance in an outbound rule's pool", instance, outRule, none},
	}
	for _, c := range cases {
		for proto, want := range map[string]arm.Egress{"Tcp": c.tcp, "Udp": c.udp} {
			got, err := w.srv.Outbound(c.id, proto)
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, proto, err)
			}
			if got != want {
				t.Errorf("%s: %s goes out by %v, want %v", c.name, proto, got, want)
			}
		}
	}

	// The machine handed to the runtime asks the emulator live: a NAT
	// gateway attached to a subnet after boot carries its VMs' traffic.
	var alone arm.Machine
	for _, m := range waitRunning(t, w.rt, len(cases)) {
		if m.Name == "alone" {
			alone = m
		}
	}
	if alone.Outbound == nil {
		t.Fatal("the runtime's machine has no Outbound")
	}
	if e, err := alone.Outbound("Tcp"); err != nil || !e.None() {
		t.Fatalf("before the NAT gateway: %v, %v; want no way out", e, err)
	}
	done(vnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", vnet(true), nil))
	if e, err := alone.Outbound("Tcp"); err != nil || e != natgw {
		t.Fatalf("after the NAT gateway: %v, %v; want %v", e, err, natgw)
	}
	if _, err := alone.Outbound("Icmp"); err == nil {
		t.Error("Icmp: no error; outbound is modelled for Tcp and Udp only")
	}
}
