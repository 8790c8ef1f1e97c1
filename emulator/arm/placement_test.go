package arm_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/arm"
)

// An availability set takes VMs only as Azure lets it (Aligned for managed
// disks, never with a zone, only at creation), spreads them over its fault
// domains, lists them, and cannot be deleted while it holds any.
func TestAvailabilitySetsSpreadVMsOverFaultDomains(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	sets := must(w.compute.NewAvailabilitySetsClient(), nil)
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	set := func(name, sku string, faultDomains int32) (armcompute.AvailabilitySetsClientCreateOrUpdateResponse, error) {
		return sets.CreateOrUpdate(w.ctx, "rg", name, armcompute.AvailabilitySet{Location: to.Ptr(location), SKU: &armcompute.SKU{Name: to.Ptr(sku)},
			Properties: &armcompute.AvailabilitySetProperties{PlatformFaultDomainCount: to.Ptr(faultDomains)}}, nil)
	}
	_, err := set("too-wide", "Aligned", 4)
	azureCode(t, err, "InvalidParameter")
	must(set("classic", "Classic", 2))
	must(set("as", "Aligned", 2))
	inSet := func(name, setName string) armcompute.VirtualMachine {
		vm := linuxVM(*w.nic("rg", name+"-nic", subnet).ID, "#cloud-config\n")
		vm.Properties.AvailabilitySet = &armcompute.SubResource{ID: to.Ptr("/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Compute/availabilitySets/" + setName)}
		return vm
	}
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "managed", inSet("managed", "classic"), nil)), "OperationNotAllowed")
	zoned := inSet("zoned", "as")
	zoned.Zones = []*string{to.Ptr("1")}
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "zoned", zoned, nil)), "InvalidParameter")
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "nowhere", inSet("nowhere", "missing"), nil)), "InvalidResourceReference")

	var domains []int32
	for _, n := range []string{"a", "b", "c"} {
		done(vms.BeginCreateOrUpdate(w.ctx, "rg", n, inSet(n, "as"), nil))
		view := must(vms.InstanceView(w.ctx, "rg", n, nil))
		if view.PlatformFaultDomain == nil {
			t.Fatalf("VM %s in an availability set has no fault domain in its instance view", n)
		}
		domains = append(domains, *view.PlatformFaultDomain)
	}
	if domains[0] == domains[1] || domains[2] != domains[0] {
		t.Errorf("fault domains of three VMs in a two-domain set: %v, want them spread round-robin", domains)
	}
	got := must(sets.Get(w.ctx, "rg", "as", nil))
	if len(got.Properties.VirtualMachines) != 3 {
		t.Errorf("the set lists %d VMs, want 3", len(got.Properties.VirtualMachines))
	}
	_, err = sets.Delete(w.ctx, "rg", "as", nil)
	azureCode(t, err, "AvailabilitySetInUse")

	moved := inSet("a", "classic")
	moved.Properties.NetworkProfile = must(vms.Get(w.ctx, "rg", "a", nil)).Properties.NetworkProfile
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "a", moved, nil)), "PropertyChangeNotAllowed")

	for _, n := range []string{"a", "b", "c"} {
		done(vms.BeginDelete(w.ctx, "rg", n, nil))
	}
	if got := must(sets.Get(w.ctx, "rg", "as", nil)); len(got.Properties.VirtualMachines) != 0 {
		t.Errorf("the set still lists %d VMs after they were deleted", len(got.Properties.VirtualMachines))
	}
	must(sets.Delete(w.ctx, "rg", "as", nil))

	// The most fault domains come from the resource SKUs, per location.
	most := map[string]string{}
	skus := must(w.compute.NewResourceSKUsClient(), nil)
	for p := skus.NewListPager(nil); p.More(); {
		for _, s := range must(p.NextPage(w.ctx)).Value {
			if *s.ResourceType == "availabilitySets" && *s.Name == "Aligned" {
				for _, c := range s.Capabilities {
					if *c.Name == "MaximumPlatformFaultDomainCount" {
						most[*s.Locations[0]] = *c.Value
					}
				}
			}
		}
	}
	if most["westeurope"] != "3" || most["westcentralus"] != "2" {
		t.Errorf("MaximumPlatformFaultDomainCount by location: %v", most)
	}
}

// A size the subscription may not deploy in a zone or a location is
// listed with its restriction, and a VM or scale set asking for it there
// is refused with SkuNotAvailable.
func TestRestrictedSizesAreRefusedWhereRestricted(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	w.srv.SetFaults(arm.FaultConfig{SKURestrictions: []arm.SKURestriction{
		{Size: "Standard_D2s_v3", Location: location, Zones: []string{"3"}},
		{Size: "Standard_D4s_v3", Location: location},
	}})
	restrictions := map[string]*armcompute.ResourceSKURestrictions{}
	skus := must(w.compute.NewResourceSKUsClient(), nil)
	for p := skus.NewListPager(&armcompute.ResourceSKUsClientListOptions{Filter: to.Ptr("location eq '" + location + "'")}); p.More(); {
		for _, s := range must(p.NextPage(w.ctx)).Value {
			if len(s.Restrictions) > 0 {
				restrictions[*s.Name] = s.Restrictions[0]
			}
		}
	}
	if r := restrictions["Standard_D2s_v3"]; r == nil || *r.Type != armcompute.ResourceSKURestrictionsTypeZone || len(r.RestrictionInfo.Zones) != 1 || *r.RestrictionInfo.Zones[0] != "3" ||
		*r.ReasonCode != armcompute.ResourceSKURestrictionsReasonCodeNotAvailableForSubscription {
		t.Errorf("D2s_v3's restriction: %+v", r)
	}
	if r := restrictions["Standard_D4s_v3"]; r == nil || *r.Type != armcompute.ResourceSKURestrictionsTypeLocation {
		t.Errorf("D4s_v3's restriction: %+v", r)
	}
	if len(restrictions) != 2 {
		t.Errorf("restricted sizes: %d, want 2", len(restrictions))
	}

	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	vm := func(name, size, zone string) armcompute.VirtualMachine {
		v := linuxVM(*w.nic("rg", name+"-nic", subnet).ID, "#cloud-config\n")
		v.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes(size))
		if zone != "" {
			v.Zones = []*string{to.Ptr(zone)}
		}
		return v
	}
	re := azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "z3", vm("z3", "Standard_D2s_v3", "3"), nil)), "SkuNotAvailable")
	if re != nil && re.StatusCode != 409 {
		t.Errorf("SkuNotAvailable with status %d, want 409", re.StatusCode)
	}
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "z1", vm("z1", "Standard_D2s_v3", "1"), nil))
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "d4", vm("d4", "Standard_D4s_v3", ""), nil)), "SkuNotAvailable")
}

// An image boots only on a size of its Hyper-V generation, and accelerated
// networking only on a size that has it.
func TestSizesBootTheirGenerationAndTakeTheirNetworking(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	imgs := must(w.compute.NewVirtualMachineImagesClient(), nil)
	g2 := must(imgs.Get(w.ctx, location, "MicrosoftWindowsServer", "WindowsServer", "2022-datacenter-g2", "20348.1006.220908", nil))
	if g2.Properties.HyperVGeneration == nil || *g2.Properties.HyperVGeneration != armcompute.HyperVGenerationTypesV2 {
		t.Errorf("the -g2 image's hyperVGeneration: %v", g2.Properties.HyperVGeneration)
	}
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	windows := func(name, size string) armcompute.VirtualMachine {
		v := windowsVM(*w.nic("rg", name+"-nic", subnet).ID, name, "")
		v.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{Publisher: to.Ptr("MicrosoftWindowsServer"), Offer: to.Ptr("WindowsServer"), SKU: to.Ptr("2022-datacenter-g2"), Version: to.Ptr("latest")}
		v.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes(size))
		return v
	}
	re := azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "av2", windows("av2", "Standard_A2_v2"), nil)), "BadRequest")
	if re != nil && re.StatusCode != 400 {
		t.Errorf("a generation 2 image on a generation 1 size: status %d", re.StatusCode)
	}
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "dsv5", windows("dsv5", "Standard_D2s_v5"), nil))
	// The generation 1 images boot on a generation 1 size.
	gen1 := linuxVM(*w.nic("rg", "gen1-nic", subnet).ID, "#cloud-config\n")
	gen1.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_A2_v2"))
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "gen1", gen1, nil))

	nics := must(w.net.NewInterfacesClient(), nil)
	fast := func(name string) string {
		return *done(nics.BeginCreateOrUpdate(w.ctx, "rg", name, armnetwork.Interface{Location: to.Ptr(location), Properties: &armnetwork.InterfacePropertiesFormat{
			EnableAcceleratedNetworking: to.Ptr(true),
			IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"),
				Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}}}}}}, nil)).ID
	}
	b2s := linuxVM(fast("b2s-nic"), "#cloud-config\n")
	b2s.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_B2s"))
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "b2s", b2s, nil)), "VMSizeIsNotPermittedToEnableAcceleratedNetworking")
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "d2s", linuxVM(fast("d2s-nic"), "#cloud-config\n"), nil))
}
