package arm_test

import (
	"net/netip"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
)

// TestNextHop: a packet leaving a NIC goes where its subnet's routes send
// it: inside the VNet locally, a pod CIDR (not in the address space) to
// None on a subnet without a route table, and to the node a user-defined
// route names once the subnet's table has one; the longest prefix wins,
// and a route written or a table attached after the NIC exists counts.
func TestNextHop(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	net := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/"
	tables := must(w.net.NewRouteTablesClient(), nil)
	done(tables.BeginCreateOrUpdate(w.ctx, "rg", "nodes", armnetwork.RouteTable{Location: to.Ptr(location)}, nil))
	subnet := func(name, prefix string, table bool) *armnetwork.Subnet {
		p := &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr(prefix)}
		if table {
			p.RouteTable = &armnetwork.RouteTable{ID: to.Ptr(net + "routeTables/nodes")}
		}
		return &armnetwork.Subnet{Name: to.Ptr(name), Properties: p}
	}
	vnets := must(w.net.NewVirtualNetworksClient(), nil)
	vnet := func(cpTable bool) {
		done(vnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", armnetwork.VirtualNetwork{Location: to.Ptr(location), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16"), to.Ptr("10.1.0.0/16")}},
			Subnets:      []*armnetwork.Subnet{subnet("cp", "10.0.0.0/16", cpTable), subnet("node", "10.1.0.0/16", true)},
		}}, nil))
	}
	vnet(false)
	nics := must(w.net.NewInterfacesClient(), nil)
	// The node's NIC at 10.1.0.5, forwarding what is not its own.
	for name, sn := range map[string]string{"cp-nic": "cp", "node-nic": "node"} {
		ipc := &armnetwork.InterfaceIPConfigurationPropertiesFormat{
			Subnet: &armnetwork.Subnet{ID: to.Ptr(net + "virtualNetworks/vnet/subnets/" + sn)}, PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodDynamic)}
		if name == "node-nic" {
			ipc.PrivateIPAllocationMethod, ipc.PrivateIPAddress = to.Ptr(armnetwork.IPAllocationMethodStatic), to.Ptr("10.1.0.5")
		}
		done(nics.BeginCreateOrUpdate(w.ctx, "rg", name, armnetwork.Interface{Location: to.Ptr(location), Properties: &armnetwork.InterfacePropertiesFormat{
			EnableIPForwarding: to.Ptr(name == "node-nic"),
			IPConfigurations:   []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"), Properties: ipc}},
		}}, nil))
	}
	routes := must(w.net.NewRoutesClient(), nil)
	route := func(name, prefix, hop string) {
		done(routes.BeginCreateOrUpdate(w.ctx, "rg", "nodes", name, armnetwork.Route{Properties: &armnetwork.RoutePropertiesFormat{
			AddressPrefix: to.Ptr(prefix), NextHopType: to.Ptr(armnetwork.RouteNextHopTypeVirtualAppliance), NextHopIPAddress: to.Ptr(hop)}}, nil))
	}
	route("pods-a", "10.244.1.0/24", "10.1.0.5")
	route("wide", "10.244.0.0/16", "10.1.0.9")

	hop := func(nic, dest string) arm.Hop {
		t.Helper()
		h, err := w.srv.NextHop(net+"networkInterfaces/"+nic, netip.MustParseAddr(dest))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, c := range []struct {
		nic, dest, typ, ip, prefix string
	}{
		{"cp-nic", "10.1.0.5", arm.HopVnetLocal, "", "10.1.0.0/16"},
		{"cp-nic", "10.244.1.7", arm.HopNone, "", "10.0.0.0/8"},
		{"cp-nic", "192.168.3.4", arm.HopNone, "", "192.168.0.0/16"},
		{"cp-nic", "20.1.2.3", arm.HopInternet, "", "0.0.0.0/0"},
		{"node-nic", "10.244.1.7", arm.HopVirtualAppliance, "10.1.0.5", "10.244.1.0/24"},
		{"node-nic", "10.244.2.7", arm.HopVirtualAppliance, "10.1.0.9", "10.244.0.0/16"},
		{"node-nic", "10.0.0.4", arm.HopVnetLocal, "", "10.0.0.0/16"},
	} {
		h := hop(c.nic, c.dest)
		if h.Type != c.typ || h.IP != c.ip || h.Prefix.String() != c.prefix {
			t.Errorf("%s to %s: %s, want %s %s %s", c.nic, c.dest, h, c.prefix, c.typ, c.ip)
		}
	}
	if h := hop("node-nic", "10.244.1.7"); h.ApplianceNIC != net+"networkInterfaces/node-nic" || !h.Forwards {
		t.Errorf("the next hop 10.1.0.5 is node-nic, which forwards; got NIC %q forwarding %v", h.ApplianceNIC, h.Forwards)
	}
	if h := hop("node-nic", "10.244.2.7"); h.ApplianceNIC != "" || h.Forwards {
		t.Errorf("no NIC holds 10.1.0.9; got NIC %q forwarding %v", h.ApplianceNIC, h.Forwards)
	}
	if h := hop("cp-nic", "10.244.1.7"); h.RouteTable != "" || h.Route != "" {
		t.Errorf("the control-plane subnet has no route table, yet the hop names %q / %q", h.RouteTable, h.Route)
	}
	// The same table attached to the control-plane subnet: its routes now
	// carry the control plane's packets to pods.
	vnet(true)
	if h := hop("cp-nic", "10.244.1.7"); h.Type != arm.HopVirtualAppliance || h.IP != "10.1.0.5" || h.Route != net+"routeTables/nodes/routes/pods-a" {
		t.Errorf("with the route table on its subnet, the control plane's packet to a pod goes by %s", h)
	}
	// A user-defined route of a system route's prefix overrides it.
	route("vnet", "10.1.0.0/16", "10.0.0.100")
	if h := hop("cp-nic", "10.1.0.5"); h.Type != arm.HopVirtualAppliance || h.IP != "10.0.0.100" {
		t.Errorf("a user-defined route of the VNet's own prefix does not override the system route: %s", h)
	}
	if _, err := w.srv.NextHop(net+"networkInterfaces/nothing", netip.MustParseAddr("10.1.0.5")); err == nil {
		t.Error("a NIC that does not exist has a next hop")
	}
}
