package arm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// What the Go SDK's clients could not do against the emulator before it
// answered as the specification says, each through the real client.
func TestTheSDKClientsWorkAsOnAzure(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")

	t.Run("disks are created (the Disk RP answers 202)", func(t *testing.T) {
		bind(t)
		disks := must(w.compute.NewDisksClient(), nil)
		d := done(disks.BeginCreateOrUpdate(w.ctx, "rg", "data", armcompute.Disk{Location: to.Ptr(location),
			SKU:        &armcompute.DiskSKU{Name: to.Ptr(armcompute.DiskStorageAccountTypesPremiumLRS)},
			Properties: &armcompute.DiskProperties{CreationData: &armcompute.CreationData{CreateOption: to.Ptr(armcompute.DiskCreateOptionEmpty)}, DiskSizeGB: to.Ptr[int32](32)}}, nil))
		if d.ID == nil || *d.Name != "data" {
			t.Fatalf("the poller's result is not the disk: %+v", d)
		}
	})

	t.Run("a missing resource group's delete is ResourceGroupNotFound", func(t *testing.T) {
		bind(t)
		azureCode(t, pollErr(w.groups.BeginDelete(w.ctx, "no-such-group", nil)), "ResourceGroupNotFound")
		nsgs := must(w.net.NewSecurityGroupsClient(), nil)
		_, err := nsgs.Get(w.ctx, "no-such-group", "nsg", nil)
		azureCode(t, err, "ResourceGroupNotFound")
	})

	t.Run("publishers are listed", func(t *testing.T) {
		bind(t)
		images := must(w.compute.NewVirtualMachineImagesClient(), nil)
		pubs := must(images.ListPublishers(w.ctx, location, nil))
		found := false
		for _, p := range pubs.VirtualMachineImageResourceArray {
			found = found || *p.Name == "cncf-upstream"
		}
		if !found {
			t.Errorf("cncf-upstream is not among the publishers: %d listed", len(pubs.VirtualMachineImageResourceArray))
		}
	})

	t.Run("a load balancer's pools are its children", func(t *testing.T) {
		bind(t)
		pips := must(w.net.NewPublicIPAddressesClient(), nil)
		pip := done(pips.BeginCreateOrUpdate(w.ctx, "rg", "lb-ip", armnetwork.PublicIPAddress{Location: to.Ptr(location),
			SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)}}, nil))
		if pip.Properties.PublicIPAddressVersion == nil || *pip.Properties.PublicIPAddressVersion != armnetwork.IPVersionIPv4 || pip.Properties.IdleTimeoutInMinutes == nil {
			t.Errorf("a public IP's defaults are missing: %+v", pip.Properties)
		}
		lbs := must(w.net.NewLoadBalancersClient(), nil)
		done(lbs.BeginCreateOrUpdate(w.ctx, "rg", "lb", armnetwork.LoadBalancer{Location: to.Ptr(location),
			SKU: &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
			Properties: &armnetwork.LoadBalancerPropertiesFormat{
				FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("fe"), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: pip.ID}}}},
				BackendAddressPools:      []*armnetwork.BackendAddressPool{{Name: to.Ptr("nodes")}},
			}}, nil))
		pools := must(w.net.NewLoadBalancerBackendAddressPoolsClient(), nil)
		done(pools.BeginCreateOrUpdate(w.ctx, "rg", "lb", "windows", armnetwork.BackendAddressPool{}, nil))
		var names []string
		for pager := pools.NewListPager("rg", "lb", nil); pager.More(); {
			for _, p := range must(pager.NextPage(w.ctx)).Value {
				names = append(names, *p.Name)
				if p.Etag == nil || p.Type == nil || *p.Type != "Microsoft.Network/loadBalancers/backendAddressPools" {
					t.Errorf("pool %s has no etag or the wrong type: %v", *p.Name, p.Type)
				}
			}
		}
		if len(names) != 2 {
			t.Errorf("pools listed: %v, want nodes and windows", names)
		}
		fes := must(w.net.NewLoadBalancerFrontendIPConfigurationsClient(), nil)
		if fe := must(fes.Get(w.ctx, "rg", "lb", "fe", nil)); *fe.Properties.PublicIPAddress.ID != *pip.ID {
			t.Errorf("the frontend read alone: %+v", fe.Properties)
		}
		done(pools.BeginDelete(w.ctx, "rg", "lb", "windows", nil))
		lb := must(lbs.Get(w.ctx, "rg", "lb", nil))
		if n := len(lb.Properties.BackendAddressPools); n != 1 {
			t.Errorf("after deleting a pool the load balancer has %d", n)
		}
	})

	t.Run("network tags are updated at once", func(t *testing.T) {
		bind(t)
		nsgs := must(w.net.NewSecurityGroupsClient(), nil)
		done(nsgs.BeginCreateOrUpdate(w.ctx, "rg", "nsg", armnetwork.SecurityGroup{Location: to.Ptr(location)}, nil))
		got := must(nsgs.UpdateTags(w.ctx, "rg", "nsg", armnetwork.TagsObject{Tags: map[string]*string{"owner": to.Ptr("ccm")}}, nil))
		if got.Tags["owner"] == nil || *got.Properties.ProvisioningState != armnetwork.ProvisioningStateSucceeded {
			t.Errorf("UpdateTags answered %+v", got)
		}
		if n := len(got.Properties.DefaultSecurityRules); n != 6 {
			t.Errorf("an NSG shows %d default rules, want Azure's 6", n)
		}
	})

	t.Run("a VM's instance view is expanded, and power actions end on the Location URL", func(t *testing.T) {
		bind(t)
		nic := w.nic("rg", "vm-nic", subnet)
		vms := must(w.compute.NewVirtualMachinesClient(), nil)
		done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "#cloud-config"), nil))
		vm := must(vms.Get(w.ctx, "rg", "vm", &armcompute.VirtualMachinesClientGetOptions{Expand: to.Ptr(armcompute.InstanceViewTypesInstanceView)}))
		if vm.Properties.InstanceView == nil || len(vm.Properties.InstanceView.Statuses) == 0 {
			t.Fatal("$expand=instanceView is ignored")
		}
		done(vms.BeginDeallocate(w.ctx, "rg", "vm", nil))
	})

	t.Run("a scale set's instance is updated", func(t *testing.T) {
		bind(t)
		sets := must(w.compute.NewVirtualMachineScaleSetsClient(), nil)
		vm := linuxVM("", "#cloud-config")
		done(sets.BeginCreateOrUpdate(w.ctx, "rg", "ss", armcompute.VirtualMachineScaleSet{Location: to.Ptr(location),
			SKU: &armcompute.SKU{Name: to.Ptr("Standard_D2s_v3"), Capacity: to.Ptr[int64](1)},
			Properties: &armcompute.VirtualMachineScaleSetProperties{UpgradePolicy: &armcompute.UpgradePolicy{Mode: to.Ptr(armcompute.UpgradeModeManual)},
				VirtualMachineProfile: &armcompute.VirtualMachineScaleSetVMProfile{
					StorageProfile: &armcompute.VirtualMachineScaleSetStorageProfile{ImageReference: vm.Properties.StorageProfile.ImageReference,
						OSDisk: &armcompute.VirtualMachineScaleSetOSDisk{CreateOption: to.Ptr(armcompute.DiskCreateOptionTypesFromImage)}},
					OSProfile: &armcompute.VirtualMachineScaleSetOSProfile{ComputerNamePrefix: to.Ptr("ss"), AdminUsername: to.Ptr("capi"), LinuxConfiguration: vm.Properties.OSProfile.LinuxConfiguration},
					NetworkProfile: &armcompute.VirtualMachineScaleSetNetworkProfile{NetworkInterfaceConfigurations: []*armcompute.VirtualMachineScaleSetNetworkConfiguration{{Name: to.Ptr("nic"),
						Properties: &armcompute.VirtualMachineScaleSetNetworkConfigurationProperties{Primary: to.Ptr(true), IPConfigurations: []*armcompute.VirtualMachineScaleSetIPConfiguration{{Name: to.Ptr("ip"),
							Properties: &armcompute.VirtualMachineScaleSetIPConfigurationProperties{Subnet: &armcompute.APIEntityReference{ID: to.Ptr(subnet)}}}}}}}},
				}}}, nil))
		insts := must(w.compute.NewVirtualMachineScaleSetVMsClient(), nil)
		cur := must(insts.Get(w.ctx, "rg", "ss", "0", nil))
		cur.Tags = map[string]*string{"drain": to.Ptr("yes")}
		cur.Properties.ProtectionPolicy = &armcompute.VirtualMachineScaleSetVMProtectionPolicy{ProtectFromScaleIn: to.Ptr(true)}
		got := done(insts.BeginUpdate(w.ctx, "rg", "ss", "0", cur.VirtualMachineScaleSetVM, nil))
		if got.Tags["drain"] == nil || got.Properties.ProtectionPolicy == nil || !*got.Properties.ProtectionPolicy.ProtectFromScaleIn {
			t.Errorf("the instance after its update: tags %v, protection %+v", got.Tags, got.Properties.ProtectionPolicy)
		}
	})

}

// Without a machine runtime nothing boots a guest, but the VM's power state
// is Azure's: running once it provisioned.
func TestAVMRunsWithoutARuntime(t *testing.T) {
	w := newWorld(t, func(o *arm.Options) { o.Runtime = nil })
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", linuxVM(*nic.ID, "#cloud-config"), nil))
	poll.Until(t, 5*time.Second, func() string {
		iv := must(vms.InstanceView(w.ctx, "rg", "vm", nil))
		power := ""
		for _, s := range iv.Statuses {
			if s.Code != nil && len(*s.Code) > 11 && (*s.Code)[:11] == "PowerState/" {
				power = *s.Code
			}
		}
		if power != "PowerState/running" {
			return fmt.Sprintf("power state %q after create, want PowerState/running", power)
		}
		return ""
	})
}
