package byovm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/byovm"
)

// azureWithSubnet is the emulator with resource group rg and a VNet
// whose subnet "nodes" is 10.1.0.0/24.
func azureWithSubnet(t *testing.T, ctx context.Context) (endpoint.Config, string) {
	t.Helper()
	cfg := azuretest.Start(t, "rg")
	vnets, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewVirtualNetworksClient)
	p, err := vnets.BeginCreateOrUpdate(ctx, "rg", "vnet", armnetwork.VirtualNetwork{Location: to.Ptr(azuretest.Location), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
		AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.1.0.0/16")}},
		Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("nodes"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.1.0.0/24")}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	vnet, err := p.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, *vnet.Properties.Subnets[0].ID
}

const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb2ajMpRmQkSxl2cZvUnbWLUl2bHBUF6kx2mzMyPwPW test"

// TestCreateAndDeleteThroughAzure: the machine is a public IP, a NIC with
// it in the given subnet and a Windows Server VM of Microsoft's image,
// made and removed through Azure's API; a VM it did not make is not
// deleted.
func TestCreateAndDeleteThroughAzure(t *testing.T) {
	ctx := context.Background()
	cfg, subnet := azureWithSubnet(t, ctx)
	svc, err := cloud.New(cfg).For(azuretest.Subscription)
	if err != nil {
		t.Fatal(err)
	}
	spec := byovm.Spec{Name: "byo-win-1", WindowsVersion: infrav1.WindowsServer2022, ResourceGroup: "rg", Location: azuretest.Location,
		SubnetID: subnet, User: "capi", SSHPublicKey: key}
	long := spec
	long.Name = "byo-windows-0001"
	if _, err := byovm.Create(ctx, svc, long, func(string) {}); err == nil || !strings.Contains(err.Error(), "at most 15") {
		t.Errorf("a 16-character name: %v, want it refused before Azure is called", err)
	}
	m, err := byovm.Create(ctx, svc, spec, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if m.PublicIP == "" || !strings.HasPrefix(m.PrivateIP, "10.1.0.") || !strings.HasSuffix(m.ID, "/virtualMachines/byo-win-1") {
		t.Errorf("machine %+v", m)
	}
	vm, err := svc.VMs.Get(ctx, "rg", "byo-win-1")
	if err != nil {
		t.Fatal(err)
	}
	img := vm.Properties.StorageProfile.ImageReference
	if *img.Publisher != "MicrosoftWindowsServer" || *img.SKU != "2022-datacenter-g2" || *vm.Properties.OSProfile.ComputerName != "byo-win-1" || vm.Properties.OSProfile.WindowsConfiguration == nil {
		t.Errorf("VM image %+v, os profile %+v", *img, *vm.Properties.OSProfile)
	}
	nic, err := svc.NICs.Get(ctx, "rg", "byo-win-1-nic")
	if err != nil {
		t.Fatal(err)
	}
	if ipc := nic.Properties.IPConfigurations[0].Properties; ipc.PublicIPAddress == nil || !strings.HasSuffix(*ipc.PublicIPAddress.ID, "/publicIPAddresses/byo-win-1-ip") {
		t.Errorf("the NIC has no public IP: %+v", ipc)
	}

	if !virtualmachines.DeletesOSDisk(vm) {
		t.Error("the VM keeps its OS disk when it is deleted")
	}
	// As an earlier winkube made it: Azure's default keeps the disk.
	vms, _ := endpoint.NewClient(cfg, azuretest.Subscription, armcompute.NewVirtualMachinesClient)
	up, err := vms.BeginUpdate(ctx, "rg", "byo-win-1", armcompute.VirtualMachineUpdate{Properties: &armcompute.VirtualMachineProperties{
		StorageProfile: &armcompute.StorageProfile{OSDisk: &armcompute.OSDisk{DeleteOption: to.Ptr(armcompute.DiskDeleteOptionTypesDetach)}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}

	if err := byovm.Delete(ctx, svc, "rg", "byo-win-1", func(string) {}); err != nil {
		t.Fatal(err)
	}
	for what, gone := range map[string]func() (bool, error){
		"OS disk": func() (bool, error) {
			x, err := svc.Disks.Get(ctx, "rg", virtualmachines.OSDiskName("byo-win-1"))
			return x == nil, err
		},
		"VM":  func() (bool, error) { x, err := svc.VMs.Get(ctx, "rg", "byo-win-1"); return x == nil, err },
		"NIC": func() (bool, error) { x, err := svc.NICs.Get(ctx, "rg", "byo-win-1-nic"); return x == nil, err },
		"IP":  func() (bool, error) { x, err := svc.PublicIPs.Get(ctx, "rg", "byo-win-1-ip"); return x == nil, err },
	} {
		if ok, err := gone(); !ok || err != nil {
			t.Errorf("%s after delete: still there (%v)", what, err)
		}
	}
	if err := byovm.Delete(ctx, svc, "rg", "byo-win-1", func(string) {}); err == nil || !strings.Contains(err.Error(), "no VM byo-win-1") {
		t.Errorf("deleting a VM that is not there: %v", err)
	}
}

// TestCreateAndDeleteLeaveWhatOthersMade: a VM, NIC or public IP of the
// machine's names that 'winkube machine create' did not make (no tag
// naming the machine) is neither taken over by Create nor deleted by
// Delete.
func TestCreateAndDeleteLeaveWhatOthersMade(t *testing.T) {
	ctx := context.Background()
	cfg, subnet := azureWithSubnet(t, ctx)
	svc, err := cloud.New(cfg).For(azuretest.Subscription)
	if err != nil {
		t.Fatal(err)
	}
	until := func(step func(tok string) (string, bool, error)) {
		t.Helper()
		if err := azuretest.Drive(t, step); err != nil {
			t.Fatal(err)
		}
	}
	// A cluster's VM, on its own NIC, without the byo tag.
	until(func(tok string) (string, bool, error) {
		return svc.NICs.Reconcile(ctx, networkinterfaces.Spec{ResourceGroup: "rg", Name: "cluster-md-0-nic", Location: azuretest.Location, SubnetID: subnet}, tok)
	})
	clusterNIC, err := svc.NICs.Get(ctx, "rg", "cluster-md-0-nic")
	if err != nil {
		t.Fatal(err)
	}
	until(func(tok string) (string, bool, error) {
		vm, next, err := svc.VMs.Reconcile(ctx, virtualmachines.Spec{ResourceGroup: "rg", Name: "cluster-md-0", Location: azuretest.Location, Size: byovm.DefaultSize, Windows: true,
			ComputerName: "cluster-md-0", Image: byovm.Images[infrav1.WindowsServer2022], AdminUsername: "capi", AdminPassword: "aA1!aA1!aA1!aA1!", NICID: *clusterNIC.ID}, tok)
		return next, vm != nil, err
	})
	// A user's public IP named as a byo machine's would be.
	until(func(tok string) (string, bool, error) {
		return svc.PublicIPs.Reconcile(ctx, publicips.Spec{ResourceGroup: "rg", Name: "byo-win-2-ip", Location: azuretest.Location}, tok)
	})

	spec := byovm.Spec{WindowsVersion: infrav1.WindowsServer2022, ResourceGroup: "rg", Location: azuretest.Location, SubnetID: subnet, User: "capi", SSHPublicKey: key}
	for name, want := range map[string]string{
		"cluster-md-0": "VM cluster-md-0 already exists",
		"byo-win-2":    "public IP byo-win-2-ip already exists",
	} {
		s := spec
		s.Name = name
		if m, err := byovm.Create(ctx, svc, s, func(string) {}); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "did not make it") {
			t.Errorf("creating %s over what others made: %+v, %v; want an error saying %q", name, m, err, want)
		}
	}
	if vm, err := svc.VMs.Get(ctx, "rg", "cluster-md-0"); err != nil || vm == nil || vm.Tags[byovm.TagKey] != nil {
		t.Errorf("the cluster's VM after the refused create: %v, %v", vm, err)
	}
	if nic, err := svc.NICs.Get(ctx, "rg", "byo-win-2-nic"); err != nil || nic != nil {
		t.Errorf("a NIC was made for a refused machine: %v, %v", nic, err)
	}

	// A byo machine whose NIC and public IP were since claimed by others
	// (their tags changed): Delete removes the VM and leaves both.
	s := spec
	s.Name = "byo-win-3"
	if _, err := byovm.Create(ctx, svc, s, func(string) {}); err != nil {
		t.Fatal(err)
	}
	nics, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewInterfacesClient)
	pips, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewPublicIPAddressesClient)
	nic, err := svc.NICs.Get(ctx, "rg", "byo-win-3-nic")
	if err != nil {
		t.Fatal(err)
	}
	nic.Tags = map[string]*string{byovm.TagKey: to.Ptr("someone-else")}
	if pn, err := nics.BeginCreateOrUpdate(ctx, "rg", "byo-win-3-nic", *nic, nil); err != nil {
		t.Fatal(err)
	} else if _, err := pn.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	pip, err := svc.PublicIPs.Get(ctx, "rg", "byo-win-3-ip")
	if err != nil {
		t.Fatal(err)
	}
	pip.Tags = nil
	if pp, err := pips.BeginCreateOrUpdate(ctx, "rg", "byo-win-3-ip", *pip, nil); err != nil {
		t.Fatal(err)
	} else if _, err := pp.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var said []string
	if err := byovm.Delete(ctx, svc, "rg", "byo-win-3", func(s string) { said = append(said, s) }); err != nil {
		t.Fatal(err)
	}
	if vm, err := svc.VMs.Get(ctx, "rg", "byo-win-3"); err != nil || vm != nil {
		t.Errorf("the byo VM after delete: %v, %v", vm, err)
	}
	if x, err := svc.NICs.Get(ctx, "rg", "byo-win-3-nic"); err != nil || x == nil {
		t.Errorf("a NIC tagged for another machine was deleted (%v)", err)
	}
	if x, err := svc.PublicIPs.Get(ctx, "rg", "byo-win-3-ip"); err != nil || x == nil {
		t.Errorf("an untagged public IP was deleted (%v)", err)
	}
	if all := strings.Join(said, "\n"); !strings.Contains(all, "leaving network interface byo-win-3-nic") || !strings.Contains(all, "leaving public IP byo-win-3-ip") {
		t.Errorf("delete did not say what it left:\n%s", all)
	}
}

// Every release --windows offers is an image Azure (here the emulator's
// marketplace) serves: a plain 2019 and 2025 VM is made from its
// generation 2 SKU, as a 2022 one is.
func TestEveryWindowsReleaseHasAnImage(t *testing.T) {
	ctx := context.Background()
	cfg, subnet := azureWithSubnet(t, ctx)
	svc, err := cloud.New(cfg).For(azuretest.Subscription)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []infrav1.WindowsServerVersion{infrav1.WindowsServer2019, infrav1.WindowsServer2025} {
		name := "byo-" + string(v)
		spec := byovm.Spec{Name: name, WindowsVersion: v, ResourceGroup: "rg", Location: azuretest.Location, SubnetID: subnet, User: "capi", SSHPublicKey: key}
		if _, err := byovm.Create(ctx, svc, spec, func(string) {}); err != nil {
			t.Fatalf("machine create --windows %s: %v", v, err)
		}
		vm, err := svc.VMs.Get(ctx, "rg", name)
		if err != nil {
			t.Fatal(err)
		}
		if img := vm.Properties.StorageProfile.ImageReference; *img.Publisher != "MicrosoftWindowsServer" || *img.SKU != byovm.Images[v].SKU {
			t.Errorf("--windows %s: VM image %s:%s, want MicrosoftWindowsServer:%s", v, *img.Publisher, *img.SKU, byovm.Images[v].SKU)
		}
	}
}
