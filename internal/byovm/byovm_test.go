package byovm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/byovm"
)

const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb2ajMpRmQkSxl2cZvUnbWLUl2bHBUF6kx2mzMyPwPW test"

// TestCreateAndDeleteThroughAzure: the machine is a public IP, a NIC with
// it in the given subnet and a Windows Server VM of Microsoft's image,
// made and removed through Azure's API; a VM it did not make is not
// deleted.
func TestCreateAndDeleteThroughAzure(t *testing.T) {
	ctx := context.Background()
	svc, subnet := emulatedSubnet(t)
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

	if err := byovm.Delete(ctx, svc, "rg", "byo-win-1", func(string) {}); err != nil {
		t.Fatal(err)
	}
	for what, gone := range map[string]func() (bool, error){
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

// emulatedSubnet starts the emulator with resource group rg and a VNet,
// and returns the services and the VNet's subnet.
func emulatedSubnet(t *testing.T) (*cloud.Services, string) {
	t.Helper()
	ctx := context.Background()
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
	svc, err := cloud.New(cfg).For(azuretest.Subscription)
	if err != nil {
		t.Fatal(err)
	}
	return svc, *vnet.Properties.Subnets[0].ID
}

// Every release --windows offers is an image Azure (here the emulator's
// marketplace) serves: a plain 2019 and 2025 VM is made from its
// generation 2 SKU, as a 2022 one is.
func TestEveryWindowsReleaseHasAnImage(t *testing.T) {
	ctx := context.Background()
	svc, subnet := emulatedSubnet(t)
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
