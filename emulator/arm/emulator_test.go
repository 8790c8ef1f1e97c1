package arm_test

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

func TestNetworkResourcesLifecycle(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnetID := w.network("rg")

	// A subnet created on its own appears inside its VNet.
	subnets := must(w.net.NewSubnetsClient(), nil)
	done(subnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", "extra", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.2.0/24")}}, nil))
	vnet := must(must(w.net.NewVirtualNetworksClient(), nil).Get(w.ctx, "rg", "vnet", nil))
	if n := len(vnet.Properties.Subnets); n != 3 {
		t.Fatalf("VNet shows %d subnets, want 3", n)
	}
	if vnet.Etag == nil || *vnet.Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded {
		t.Fatalf("VNet etag %v, state %v; want an ETag and Succeeded", vnet.Etag, *vnet.Properties.ProvisioningState)
	}

	nsgs := must(w.net.NewSecurityGroupsClient(), nil)
	nsg := done(nsgs.BeginCreateOrUpdate(w.ctx, "rg", "nsg", armnetwork.SecurityGroup{
		Location: to.Ptr(location),
		Properties: &armnetwork.SecurityGroupPropertiesFormat{SecurityRules: []*armnetwork.SecurityRule{{
			Name: to.Ptr("allow_apiserver"),
			Properties: &armnetwork.SecurityRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.SecurityRuleProtocolTCP), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
				Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Priority: to.Ptr[int32](2200),
				SourceAddressPrefix: to.Ptr("*"), SourcePortRange: to.Ptr("*"), DestinationAddressPrefix: to.Ptr("*"), DestinationPortRange: to.Ptr("6443"),
			},
		}}},
	}, nil))
	rules := must(w.net.NewSecurityRulesClient(), nil)
	done(rules.BeginCreateOrUpdate(w.ctx, "rg", "nsg", "vxlan", armnetwork.SecurityRule{Properties: &armnetwork.SecurityRulePropertiesFormat{
		Protocol: to.Ptr(armnetwork.SecurityRuleProtocolUDP), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
		Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Priority: to.Ptr[int32](2300), DestinationPortRange: to.Ptr("4789"),
	}}, nil))
	pager := rules.NewListPager("rg", "nsg", nil)
	var ruleNames []string
	for pager.More() {
		for _, r := range must(pager.NextPage(w.ctx)).Value {
			ruleNames = append(ruleNames, *r.Name)
		}
	}
	if strings.Join(ruleNames, ",") != "allow_apiserver,vxlan" {
		t.Fatalf("security rules %v, want allow_apiserver and vxlan", ruleNames)
	}
	// Two rules with one priority and direction conflict, as in Azure.
	err := pollErr(rules.BeginCreateOrUpdate(w.ctx, "rg", "nsg", "dup", armnetwork.SecurityRule{Properties: &armnetwork.SecurityRulePropertiesFormat{
		Protocol: to.Ptr(armnetwork.SecurityRuleProtocolTCP), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
		Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Priority: to.Ptr[int32](2300),
	}}, nil))
	azureCode(t, err, "SecurityRuleConflict")

	rts := must(w.net.NewRouteTablesClient(), nil)
	rt := done(rts.BeginCreateOrUpdate(w.ctx, "rg", "routes", armnetwork.RouteTable{Location: to.Ptr(location)}, nil))
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	pip := done(pips.BeginCreateOrUpdate(w.ctx, "rg", "apiserver-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location),
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{DNSSettings: &armnetwork.PublicIPAddressDNSSettings{DomainNameLabel: to.Ptr("mycluster")}}}, nil))
	addr := netip.MustParseAddr(*pip.Properties.IPAddress)
	if !addr.IsLoopback() {
		t.Fatalf("public IP %s is not a loopback address", addr)
	}
	if *pip.Properties.DNSSettings.Fqdn != "mycluster.westeurope.cloudapp.azure.com" {
		t.Fatalf("fqdn %s", *pip.Properties.DNSSettings.Fqdn)
	}
	natPIP := done(pips.BeginCreateOrUpdate(w.ctx, "rg", "nat-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	if *natPIP.Properties.IPAddress == *pip.Properties.IPAddress {
		t.Fatal("two public IPs got the same address")
	}
	nats := must(w.net.NewNatGatewaysClient(), nil)
	nat := done(nats.BeginCreateOrUpdate(w.ctx, "rg", "nat", armnetwork.NatGateway{Location: to.Ptr(location),
		Properties: &armnetwork.NatGatewayPropertiesFormat{PublicIPAddresses: []*armnetwork.SubResource{{ID: natPIP.ID}}}}, nil))

	// The node subnet gets the NSG, route table and NAT gateway.
	done(subnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", "nodes", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{
		AddressPrefix: to.Ptr("10.0.1.0/24"), NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: nsg.ID},
		RouteTable: &armnetwork.RouteTable{ID: rt.ID}, NatGateway: &armnetwork.SubResource{ID: nat.ID},
	}}, nil))
	// ... and then the NSG cannot go.
	azureCode(t, pollErr(nsgs.BeginDelete(w.ctx, "rg", "nsg", nil)), "InUseNetworkSecurityGroupCannotBeDeleted")

	lbID := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/apiserver-lb"
	lbs := must(w.net.NewLoadBalancersClient(), nil)
	lb := done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "apiserver-lb", armnetwork.LoadBalancer{
		Location: to.Ptr(location),
		SKU:      &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("frontend"), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: pip.ID}}}},
			BackendAddressPools:      []*armnetwork.BackendAddressPool{{Name: to.Ptr("backend")}},
			Probes:                   []*armnetwork.Probe{{Name: to.Ptr("https"), Properties: &armnetwork.ProbePropertiesFormat{Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](6443)}}},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("apiserver"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](6443), BackendPort: to.Ptr[int32](6443),
				FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/frontend")},
				BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(lbID + "/backendAddressPools/backend")},
				Probe:                   &armnetwork.SubResource{ID: to.Ptr(lbID + "/probes/https")},
			}}},
		},
	}, nil))
	if *lb.Properties.FrontendIPConfigurations[0].ID != lbID+"/frontendIPConfigurations/frontend" {
		t.Fatalf("frontend ID %s", *lb.Properties.FrontendIPConfigurations[0].ID)
	}
	natRules := must(w.net.NewInboundNatRulesClient(), nil)
	for name, port := range map[string]int32{"cp-0": 22, "cp-1": 2201} {
		done(natRules.BeginCreateOrUpdate(w.ctx, "rg", "apiserver-lb", name, armnetwork.InboundNatRule{Properties: &armnetwork.InboundNatRulePropertiesFormat{
			Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr(port), BackendPort: to.Ptr[int32](22),
			FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/frontend")},
		}}, nil))
	}
	azureCode(t, pollErr(natRules.BeginCreateOrUpdate(w.ctx, "rg", "apiserver-lb", "cp-2", armnetwork.InboundNatRule{Properties: &armnetwork.InboundNatRulePropertiesFormat{
		Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](2201), BackendPort: to.Ptr[int32](22),
		FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/frontend")},
	}}, nil)), "InboundNatRuleFrontendPortConflict")

	// A NIC joins the backend pool and a NAT rule, and gets the subnet's
	// first usable address (Azure keeps .0 to .3).
	nics := must(w.net.NewInterfacesClient(), nil)
	nic := done(nics.BeginCreateOrUpdate(w.ctx, "rg", "cp-0-nic", armnetwork.Interface{
		Location: to.Ptr(location),
		Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name: to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{
				Subnet:                          &armnetwork.Subnet{ID: to.Ptr(subnetID)},
				LoadBalancerBackendAddressPools: []*armnetwork.BackendAddressPool{{ID: to.Ptr(lbID + "/backendAddressPools/backend")}},
				LoadBalancerInboundNatRules:     []*armnetwork.InboundNatRule{{ID: to.Ptr(lbID + "/inboundNatRules/cp-0")}},
			},
		}}},
	}, nil))
	if ip := *nic.Properties.IPConfigurations[0].Properties.PrivateIPAddress; ip != "10.0.1.4" {
		t.Fatalf("first NIC got %s, want 10.0.1.4", ip)
	}
	second := w.nic("rg", "second-nic", subnetID)
	if ip := *second.Properties.IPConfigurations[0].Properties.PrivateIPAddress; ip != "10.0.1.5" {
		t.Fatalf("second NIC got %s, want 10.0.1.5", ip)
	}
	// A PATCH of tags keeps the address.
	patched := must(nics.UpdateTags(w.ctx, "rg", "second-nic", armnetwork.TagsObject{Tags: map[string]*string{"owner": to.Ptr("winkube")}}, nil))
	if *patched.Tags["owner"] != "winkube" || *patched.Properties.IPConfigurations[0].Properties.PrivateIPAddress != "10.0.1.5" {
		t.Fatalf("PATCH lost the address or the tag: %+v", patched.Properties.IPConfigurations[0].Properties)
	}
	// A VM on the NIC boots with the NAT rule's public frontend, so the
	// machine runtime can forward it (SSH to control-plane VMs).
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "cp-0", linuxVM(*nic.ID, "#cloud-config"), nil))
	booted := waitRunning(t, w.rt, 1)
	want := []arm.NATRule{{Name: "cp-0", Frontend: *pip.Properties.IPAddress + ":22", BackendPort: 22}}
	if !reflect.DeepEqual(booted[0].InboundNAT, want) {
		t.Fatalf("the booted VM's inbound NAT %+v, want %+v", booted[0].InboundNAT, want)
	}
	done(vms.BeginDelete(w.ctx, "rg", "cp-0", nil))
	disks := must(w.compute.NewDisksClient(), nil)
	for _, d := range w.resources("rg") {
		if strings.HasPrefix(d, "cp-0_OsDisk") {
			done(disks.BeginDelete(w.ctx, "rg", d, nil))
		}
	}
	// The NAT rule in use cannot be deleted; the LB neither.
	azureCode(t, pollErr(natRules.BeginDelete(w.ctx, "rg", "apiserver-lb", "cp-0", nil)), "InboundNatRuleInUse")
	azureCode(t, pollErr(subnets.BeginDelete(w.ctx, "rg", "vnet", "nodes", nil)), "InUseSubnetCannotBeDeleted")

	// Deleting in dependency order leaves the group empty.
	done(nics.BeginDelete(w.ctx, "rg", "cp-0-nic", nil))
	done(nics.BeginDelete(w.ctx, "rg", "second-nic", nil))
	done(natRules.BeginDelete(w.ctx, "rg", "apiserver-lb", "cp-0", nil))
	done(lbs.BeginDelete(w.ctx, "rg", "apiserver-lb", nil))
	if _, err := lbs.Get(w.ctx, "rg", "apiserver-lb", nil); err == nil {
		t.Fatal("a deleted load balancer is still there")
	} else {
		azureCode(t, err, "ResourceNotFound")
	}
	done(must(w.net.NewVirtualNetworksClient(), nil).BeginDelete(w.ctx, "rg", "vnet", nil))
	for _, name := range []string{"apiserver-ip"} {
		done(pips.BeginDelete(w.ctx, "rg", name, nil))
	}
	done(nsgs.BeginDelete(w.ctx, "rg", "nsg", nil))
	left := w.resources("rg")
	if strings.Join(left, ",") != "nat,nat-ip,routes" {
		t.Fatalf("resources left %v, want the NAT gateway, its IP and the route table", left)
	}
}

// resources lists the top-level resource names of a group.
func (w *world) resources(rg string) []string {
	var names []string
	p := w.res.NewListByResourceGroupPager(rg, nil)
	for p.More() {
		for _, r := range must(p.NextPage(w.ctx)).Value {
			names = append(names, *r.Name)
		}
	}
	return names
}

func TestVirtualMachinesBootThroughTheRuntime(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnetID := w.network("rg")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)

	linuxNIC := w.nic("rg", "linux-nic", subnetID)
	vm := done(vms.BeginCreateOrUpdate(w.ctx, "rg", "cluster-md-0-abcde", linuxVM(*linuxNIC.ID, "#cloud-config\nruncmd: [kubeadm join]\n"), nil)).VirtualMachine
	if *vm.Properties.ProvisioningState != "Succeeded" || vm.Properties.VMID == nil {
		t.Fatalf("VM state %v, vmId %v", *vm.Properties.ProvisioningState, vm.Properties.VMID)
	}
	// Azure never returns custom data or passwords.
	if vm.Properties.OSProfile.CustomData != nil || vm.Properties.OSProfile.AdminPassword != nil {
		t.Fatal("the VM's custom data or password came back in a GET")
	}

	winNIC := w.nic("rg", "win-nic", subnetID)
	win := done(vms.BeginCreateOrUpdate(w.ctx, "rg", "cluster-abcde", windowsVM(*winNIC.ID, "cluster-abcde", "<powershell>kubeadm join</powershell>"), nil)).VirtualMachine
	if *win.Properties.StorageProfile.OSDisk.OSType != armcompute.OperatingSystemTypesWindows {
		t.Fatal("the Windows VM's OS disk is not Windows")
	}

	running := map[string]arm.Machine{}
	for _, m := range waitRunning(t, w.rt, 2) {
		running[m.Name] = m
	}
	lm, wm := running["cluster-md-0-abcde"], running["cluster-abcde"]
	if lm.OS != "Linux" || string(lm.CustomData) != "#cloud-config\nruncmd: [kubeadm join]\n" || lm.PrivateIPs[0] != "10.0.1.4" || lm.SSHPublicKeys[0] != "ssh-ed25519 AAAA test" {
		t.Fatalf("Linux machine handed to the runtime: %+v", lm)
	}
	if wm.OS != "Windows" || wm.ComputerName != "cluster-abcde" || wm.Image.SKU != "windows-2022-containerd-gen1" || wm.PrivateIPs[0] != "10.0.1.5" {
		t.Fatalf("Windows machine handed to the runtime: %+v", wm)
	}

	// Running once the runtime's boot returned.
	poll.Until(t, 10*time.Second, func() string {
		view := must(vms.InstanceView(w.ctx, "rg", "cluster-abcde", nil))
		codes := []string{}
		for _, s := range view.Statuses {
			codes = append(codes, *s.Code)
		}
		if strings.Join(codes, ",") != "ProvisioningState/succeeded,PowerState/running" {
			return fmt.Sprintf("instance view statuses %v", codes)
		}
		return ""
	})

	// The OS disk exists, attached; it and the NIC outlive the VM (the
	// provider deletes them), and cannot be deleted while it runs.
	disks := must(w.compute.NewDisksClient(), nil)
	diskName := *vm.Properties.StorageProfile.OSDisk.Name
	disk := must(disks.Get(w.ctx, "rg", diskName, nil))
	if *disk.Properties.DiskState != armcompute.DiskStateAttached || *disk.ManagedBy != *vm.ID || *disk.Properties.DiskSizeGB != 128 {
		t.Fatalf("OS disk %+v", disk.Properties)
	}
	azureCode(t, pollErr(disks.BeginDelete(w.ctx, "rg", diskName, nil)), "OperationNotAllowed")
	nics := must(w.net.NewInterfacesClient(), nil)
	azureCode(t, pollErr(nics.BeginDelete(w.ctx, "rg", "linux-nic", nil)), "NicInUse")

	done(vms.BeginDelete(w.ctx, "rg", "cluster-md-0-abcde", nil))
	if len(w.rt.Stopped()) != 1 || !strings.HasSuffix(w.rt.Stopped()[0], "/cluster-md-0-abcde") {
		t.Fatalf("stopped %v, want the deleted VM", w.rt.Stopped())
	}
	disk = must(disks.Get(w.ctx, "rg", diskName, nil))
	if *disk.Properties.DiskState != armcompute.DiskStateUnattached {
		t.Fatalf("disk of a deleted VM is %s", *disk.Properties.DiskState)
	}
	done(disks.BeginDelete(w.ctx, "rg", diskName, nil))
	done(nics.BeginDelete(w.ctx, "rg", "linux-nic", nil))

	// Deleting the group takes everything, the running VM included.
	done(w.groups.BeginDelete(w.ctx, "rg", nil))
	if n := len(w.rt.Running()); n != 0 {
		t.Fatalf("%d machines still running after the group was deleted", n)
	}
	if _, err := w.groups.Get(w.ctx, "rg", nil); err == nil {
		t.Fatal("deleted resource group still there")
	} else {
		azureCode(t, err, "ResourceGroupNotFound")
	}
	w.group("rg")
	if left := w.resources("rg"); len(left) != 0 {
		t.Fatalf("a recreated group has the old resources %v", left)
	}
}

func TestAzureValidationErrors(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnetID := w.network("rg")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	nic := w.nic("rg", "nic", subnetID)

	// A Windows computer name of 16 characters.
	err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "win", windowsVM(*nic.ID, "cluster-md-win-0", ""), nil))
	re := azureCode(t, err, "InvalidParameter")
	if re.StatusCode != 400 || !strings.Contains(err.Error(), "cannot be more than 15 characters") {
		t.Fatalf("status %d: %v", re.StatusCode, err)
	}
	// A Windows VM with no admin password.
	noPass := windowsVM(*nic.ID, "win", "")
	noPass.Properties.OSProfile.AdminPassword = nil
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "win", noPass, nil)), "InvalidParameter")
	// An unknown size, and an image that does not exist.
	bad := linuxVM(*nic.ID, "")
	bad.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_Huge"))
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", bad, nil)), "InvalidParameter")
	bad = linuxVM(*nic.ID, "")
	bad.Properties.StorageProfile.ImageReference.SKU = to.Ptr("k8s-1dot99dot0-ubuntu-2204")
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", bad, nil)), "PlatformImageNotFound")
	// A NIC that does not exist.
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID+"-missing", ""), nil)), "InvalidResourceReference")
	// Custom data that is not base64.
	bad = linuxVM(*nic.ID, "")
	bad.Properties.OSProfile.CustomData = to.Ptr("not base64!")
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", bad, nil)), "InvalidParameter")
	// An availability zone the region does not have.
	bad = linuxVM(*nic.ID, "")
	bad.Zones = []*string{to.Ptr("4")}
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", bad, nil)), "InvalidParameter")
	// Custom data cannot change on an existing VM.
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "one"), nil))
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "two"), nil)), "PropertyChangeNotAllowed")
	// ... but the same PUT again is fine (idempotent).
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "one"), nil))

	// A static private IP outside its subnet, and one already taken.
	nics := must(w.net.NewInterfacesClient(), nil)
	static := func(ip string) armnetwork.Interface {
		return armnetwork.Interface{Location: to.Ptr(location), Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{
			Name: to.Ptr("ipconfig1"),
			Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnetID)},
				PrivateIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic), PrivateIPAddress: to.Ptr(ip)},
		}}}}
	}
	azureCode(t, pollErr(nics.BeginCreateOrUpdate(w.ctx, "rg", "static", static("10.0.9.9"), nil)), "PrivateIPAddressNotInSubnet")
	azureCode(t, pollErr(nics.BeginCreateOrUpdate(w.ctx, "rg", "static", static("10.0.1.4"), nil)), "PrivateIPAddressInUse")
	got := done(nics.BeginCreateOrUpdate(w.ctx, "rg", "static", static("10.0.1.200"), nil))
	if *got.Properties.IPConfigurations[0].Properties.PrivateIPAddress != "10.0.1.200" {
		t.Fatal("static address not kept")
	}
	// A subnet outside its VNet, and one overlapping another.
	subnets := must(w.net.NewSubnetsClient(), nil)
	azureCode(t, pollErr(subnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", "outside", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.1.0.0/24")}}, nil)), "NetcfgSubnetRangeOutsideVnet")
	azureCode(t, pollErr(subnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", "overlap", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.1.128/25")}}, nil)), "NetcfgSubnetRangesOverlap")
	// A reference to a route table that does not exist.
	azureCode(t, pollErr(subnets.BeginCreateOrUpdate(w.ctx, "rg", "vnet", "rt", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.5.0/24"),
		RouteTable: &armnetwork.RouteTable{ID: to.Ptr("/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Network/routeTables/nope")}}}, nil)), "InvalidResourceReference")
	// A resource in a group that does not exist.
	_, err = must(w.net.NewPublicIPAddressesClient(), nil).BeginCreateOrUpdate(w.ctx, "nope", "ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil)
	azureCode(t, err, "ResourceGroupNotFound")
	// No location.
	_, err = must(w.net.NewPublicIPAddressesClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "ip", armnetwork.PublicIPAddress{}, nil)
	azureCode(t, err, "LocationRequired")
	// Resource groups are tracked.
	_, err = w.groups.CreateOrUpdate(w.ctx, "rg", armresources.ResourceGroup{Location: to.Ptr("eastus")}, nil)
	azureCode(t, err, "InvalidResourceGroupLocation")
}

// Public IPs are handed out from PublicIPStart on, wrapping around the
// pool: a local world starts each new world's addresses elsewhere in its
// block, so that its API server is not where a kubectl cached an earlier
// world's discovery.
func TestPublicIPsStartWhereTold(t *testing.T) {
	w := newWorld(t, func(o *arm.Options) {
		o.PublicIPPool = netip.MustParsePrefix("127.5.0.0/16")
		o.PublicIPStart = netip.MustParseAddr("127.5.255.253")
	})
	w.group("rg")
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	var got []string
	for _, name := range []string{"a", "b", "c"} {
		pip := done(pips.BeginCreateOrUpdate(w.ctx, "rg", name, armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
		got = append(got, *pip.Properties.IPAddress)
	}
	// .255 is skipped, then the pool's beginning.
	if strings.Join(got, " ") != "127.5.255.253 127.5.255.254 127.5.0.1" {
		t.Errorf("public IPs %v, want 127.5.255.253, 127.5.255.254, then 127.5.0.1", got)
	}
}
