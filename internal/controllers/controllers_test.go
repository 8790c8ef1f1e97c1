package controllers_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/async"
)

func TestClusterAndMachinesLifecycle(t *testing.T) {
	stop := startControllers(t, armCfg)
	defer stop()
	f, az := provisionedCluster(t, "mixed")

	// The network and the API server's endpoint.
	inv := f.azureInventory(az)
	for typ, want := range map[string]int{"networkSecurityGroups": 2, "routeTables": 1, "natGateways": 1, "publicIPAddresses": 2, "virtualNetworks": 1, "loadBalancers": 1} {
		if len(inv[typ]) != want {
			t.Errorf("%d %s in the resource group, want %d: %v", len(inv[typ]), typ, want, inv)
		}
	}
	// Both subnets take the node route table: with host-gw the API server
	// reaches pods on workers only through the routes in it.
	vnetsClient, _ := armnetwork.NewVirtualNetworksClient(subscription, armCfg.Credential, mustOptions(t))
	vnet, err := vnetsClient.Get(f.ctx, f.ns, "mixed-vnet", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range vnet.Properties.Subnets {
		if rt := sn.Properties.RouteTable; rt == nil || !strings.HasSuffix(*rt.ID, "/routeTables/mixed-node-routetable") {
			t.Errorf("subnet %s has route table %+v, want mixed-node-routetable", *sn.Name, rt)
		}
	}
	ep := f.ac.Spec.ControlPlaneEndpoint
	if addr, err := netip.ParseAddr(ep.Host); err != nil || !addr.IsLoopback() || ep.Port != 6443 {
		t.Fatalf("controlPlaneEndpoint %+v, want the emulator's loopback public IP on 6443", ep)
	}
	if n := len(f.ac.Status.FailureDomains); n != 3 {
		t.Fatalf("%d failure domains, want westeurope's 3 zones", n)
	}

	// One control plane, one Linux worker, one Windows worker whose name is
	// too long for Windows.
	f.newMachine("mixed-control-plane-x7k2p", true, false, "1")
	f.newMachine("mixed-md-linux-abcde", false, false, "2")
	f.newMachine("mixed-md-windows-qwert", false, true, "3")
	ams := f.waitMachinesProvisioned(time.Minute, "mixed-control-plane-x7k2p", "mixed-md-linux-abcde", "mixed-md-windows-qwert")

	win := ams["mixed-md-windows-qwert"]
	// First nine characters "mixed-md-" lose their trailing '-', then '-' and the last five.
	if win.Status.VMName != "mixed-md-qwert" {
		t.Fatalf("Windows VM name %q, want mixed-md-qwert", win.Status.VMName)
	}
	wantID := "azure:///subscriptions/" + subscription + "/resourceGroups/" + f.ns + "/providers/Microsoft.Compute/virtualMachines/mixed-md-qwert"
	if win.Spec.ProviderID != wantID {
		t.Fatalf("providerID %q, want %q", win.Spec.ProviderID, wantID)
	}
	if len(win.Status.Addresses) != 2 || win.Status.Addresses[1].Type != clusterv1.MachineInternalIP || !strings.HasPrefix(win.Status.Addresses[1].Address, "10.1.0.") {
		t.Fatalf("addresses %+v, want the hostname and an address in the node subnet", win.Status.Addresses)
	}
	vm, err := az.vms.Get(f.ctx, f.ns, "mixed-md-qwert", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The default image is CAPZ's community gallery image for the release.
	const gallery = "/CommunityGalleries/ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019/Images/"
	if img := ptr.Deref(vm.Properties.StorageProfile.ImageReference.CommunityGalleryImageID, ""); img != gallery+"capi-win-2022-containerd/Versions/1.36.3" {
		t.Fatalf("Windows image %q, want the default for v1.36.3", img)
	}
	if *vm.Properties.OSProfile.AdminUsername != "capi" || *vm.Properties.OSProfile.ComputerName != "mixed-md-qwert" || *vm.Zones[0] != "3" {
		t.Fatalf("Windows VM profile %+v zones %v", vm.Properties.OSProfile, vm.Zones)
	}
	cp, err := az.vms.Get(f.ctx, f.ns, "mixed-control-plane-x7k2p", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(cp.Properties.StorageProfile.ImageReference.CommunityGalleryImageID, "") != gallery+"capi-ubun2-2404/Versions/1.36.3" || cp.Properties.OSProfile.LinuxConfiguration.SSH.PublicKeys[0].KeyData == nil {
		t.Fatal("the control-plane VM lacks the Linux image or its SSH key")
	}
	// The custom data reached the machines as written by the bootstrap provider.
	booted := map[string]string{}
	for _, m := range runtime.Running() {
		booted[m.Name] = string(m.CustomData)
	}
	if booted["mixed-md-qwert"] != "<powershell>kubeadm join mixed-md-windows-qwert</powershell>" ||
		booted["mixed-md-linux-abcde"] != "#cloud-config\nruncmd: [kubeadm join mixed-md-linux-abcde]\n" {
		t.Fatalf("custom data handed to the machines: %q", booted)
	}
	// The control-plane VM is behind the load balancer, with SSH on port 22.
	lb, err := az.lbs.Get(f.ctx, f.ns, f.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules := lb.Properties.InboundNatRules
	if len(rules) != 1 || *rules[0].Name != "mixed-control-plane-x7k2p" || *rules[0].Properties.FrontendPort != 22 {
		t.Fatalf("NAT rules %+v, want one on port 22 for the control plane", rules)
	}
	nic, err := az.nics.Get(f.ctx, f.ns, "mixed-control-plane-x7k2p-nic", nil)
	if err != nil || len(nic.Properties.IPConfigurations[0].Properties.LoadBalancerBackendAddressPools) != 1 {
		t.Fatalf("control-plane NIC not in the backend pool: %v", err)
	}

	// Machines go, with their VMs, disks, NICs and NAT rule.
	var objs []client.Object
	for _, am := range ams {
		objs = append(objs, am)
	}
	f.deleteAndWait(time.Minute, objs...)
	inv = f.azureInventory(az)
	for _, typ := range []string{"virtualMachines", "disks", "networkInterfaces"} {
		if len(inv[typ]) != 0 {
			t.Fatalf("%s left after deleting the machines: %v", typ, inv[typ])
		}
	}
	lb, _ = az.lbs.Get(f.ctx, f.ns, f.ac.Spec.NetworkSpec.APIServerLB.Name, nil)
	if len(lb.Properties.InboundNatRules) != 0 {
		t.Fatal("the control plane's NAT rule outlived it")
	}

	// The cluster goes, with its resource group.
	f.deleteAndWait(time.Minute, f.ac)
	if _, err := az.groups.Get(f.ctx, f.ns, nil); !async.IsNotFound(err) {
		t.Fatalf("the cluster's resource group is still there: %v", err)
	}
}

func (f *fixture) azureInventory(az *azure) map[string][]string { return az.inventory(f.ns) }

// TestUserVNetIsNeverDeleted: a VNet the user made (not tagged as the
// cluster's), in the user's resource group, gets the cluster's subnets but
// survives the cluster, as does the group.
func TestUserVNetIsNeverDeleted(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	az := newAzure(t, armCfg)
	ctx := context.Background()
	const rg = "user-rg"
	if _, err := az.groups.CreateOrUpdate(ctx, rg, armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	vnets, _ := armnetwork.NewVirtualNetworksClient(subscription, armCfg.Credential, mustOptions(t))
	p, err := vnets.BeginCreateOrUpdate(ctx, rg, "user-vnet", armnetwork.VirtualNetwork{
		Location:   to.Ptr("westeurope"),
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/12")}}},
	}, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, &azruntime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond})
	}
	if err != nil {
		t.Fatal(err)
	}
	f := newCluster(t, "byo", func(s *infrav1.AzureClusterSpec) {
		s.ResourceGroup = rg
		s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: "user-vnet", CIDRBlocks: []string{"10.0.0.0/12"}}
		s.NetworkSpec.Subnets = []infrav1.SubnetSpec{
			{Name: "byo-cp", Role: infrav1.SubnetControlPlane, CIDRBlocks: []string{"10.0.0.0/16"}},
			{Name: "byo-nodes", Role: infrav1.SubnetNode, CIDRBlocks: []string{"10.1.0.0/16"}},
		}
	})
	f.waitClusterProvisioned(time.Minute)
	v, err := vnets.Get(ctx, rg, "user-vnet", nil)
	if err != nil || len(v.Properties.Subnets) != 2 {
		t.Fatalf("the user's VNet did not get the cluster's two subnets: %v", err)
	}
	f.deleteAndWait(time.Minute, f.ac)
	inv := az.inventory(rg)
	if len(inv["virtualNetworks"]) != 1 {
		t.Fatalf("the user's VNet was deleted: %v", inv)
	}
	for _, typ := range []string{"loadBalancers", "publicIPAddresses", "natGateways", "networkSecurityGroups", "routeTables"} {
		if len(inv[typ]) != 0 {
			t.Fatalf("winkube's %s outlived the cluster: %v", typ, inv[typ])
		}
	}
	v, _ = vnets.Get(ctx, rg, "user-vnet", nil)
	if len(v.Properties.Subnets) != 0 {
		t.Fatalf("the cluster's subnets outlived it in the user's VNet")
	}
}

func mustOptions(t testing.TB) *arm.ClientOptions {
	o, err := armCfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	return o
}
