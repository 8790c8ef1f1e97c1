package arm_test

import (
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
)

// TestOSProfileRules: the Compute API's rules for admin passwords, admin
// user names and computer names, one case each way where a rule has two.
func TestOSProfileRules(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	nic := *w.nic("rg", "nic", w.network("rg")).ID
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	win := func(mutate func(*armcompute.OSProfile)) armcompute.VirtualMachine {
		vm := windowsVM(nic, "win-0", "")
		mutate(vm.Properties.OSProfile)
		return vm
	}
	lin := func(mutate func(*armcompute.OSProfile)) armcompute.VirtualMachine {
		vm := linuxVM(nic, "")
		mutate(vm.Properties.OSProfile)
		return vm
	}
	password := func(p string) func(*armcompute.OSProfile) {
		return func(o *armcompute.OSProfile) { o.AdminPassword = to.Ptr(p) }
	}
	user := func(u string) func(*armcompute.OSProfile) {
		return func(o *armcompute.OSProfile) { o.AdminUsername = to.Ptr(u) }
	}
	computer := func(n string) func(*armcompute.OSProfile) {
		return func(o *armcompute.OSProfile) { o.ComputerName = to.Ptr(n) }
	}
	for _, tc := range []struct {
		name   string
		vm     armcompute.VirtualMachine
		target string // "" when the VM must be accepted
		msg    string
	}{
		{"windows password of 7 characters", win(password("Ab1!xyz")), "adminPassword", "between 8-123 characters"},
		{"windows password of 8 characters", win(password("Ab1!xyzw")), "", ""},
		{"windows password of 124 characters", win(password("Ab1!" + strings.Repeat("x", 120))), "adminPassword", "8-123"},
		{"windows password of 123 characters", win(password("Ab1!" + strings.Repeat("x", 119))), "", ""},
		{"linux password of 5 characters", lin(password("Ab1!x")), "adminPassword", "between 6-72 characters"},
		{"linux password of 6 characters", lin(password("Ab1!xy")), "", ""},
		{"linux password of 73 characters", lin(password("Ab1!" + strings.Repeat("x", 69))), "adminPassword", "6-72"},
		{"two classes only", win(password("abcdefgh12")), "adminPassword", "at least 3 of password complexity"},
		{"lower, upper and digit", win(password("Abcdefgh12")), "", ""},
		{"lower, digit and underscore", win(password("abcdef_12")), "", ""},
		{"a control character", win(password("Abcdef1!\t")), "adminPassword", "Control characters"},
		{"disallowed P@ssw0rd", win(password("P@ssw0rd")), "adminPassword", ""},
		{"disallowed Password!", win(password("Password!")), "adminPassword", ""},
		{"disallowed abc@123 on Linux", lin(password("abc@123")), "adminPassword", ""},
		{"reserved user administrator", win(user("Administrator")), "adminUsername", "The Admin Username specified is not allowed."},
		{"reserved user admin on Linux", lin(user("admin")), "adminUsername", ""},
		{"reserved user root", lin(user("root")), "adminUsername", ""},
		{"reserved user test1", win(user("test1")), "adminUsername", ""},
		{"windows user ending in a period", win(user("capi.")), "adminUsername", ""},
		{"windows user of 21 characters", win(user(strings.Repeat("u", 21))), "adminUsername", ""},
		{"linux user of 21 characters", lin(user(strings.Repeat("u", 21))), "", ""},
		{"user with a slash", lin(user("ca/pi")), "adminUsername", ""},
		{"windows computer name of 16 characters", win(computer("cluster-md-win-0")), "computerName", "15 characters"},
		{"windows computer name entirely numeric", win(computer("12345")), "computerName", "entirely numeric"},
		{"windows computer name with a period", win(computer("win.0")), "computerName", ""},
		{"windows computer name ending in a hyphen", win(computer("win-")), "computerName", ""},
		{"linux host name of 65 characters", lin(computer(strings.Repeat("n", 65))), "computerName", "64 characters"},
		{"linux host name of 64 characters", lin(computer(strings.Repeat("n", 64))), "", ""},
		{"linux host name with an underscore", lin(computer("node_0")), "computerName", ""},
		{"linux host name with a period inside", lin(computer("node.cluster")), "", ""},
		{"linux host name ending in a period", lin(computer("node.")), "computerName", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bind(t)
			err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", tc.vm, nil))
			if tc.target == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				done(vms.BeginDelete(w.ctx, "rg", "vm", nil))
				return
			}
			re := azureCode(t, err, "InvalidParameter")
			if re.StatusCode != 400 || !strings.Contains(err.Error(), `"target": "`+tc.target+`"`) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("want 400 with target %s and %q: %v", tc.target, tc.msg, err)
			}
		})
	}
}

// TestPropertiesFixedAtCreation: what Azure does not let a PUT change on
// an existing VM is refused with 409 PropertyChangeNotAllowed; the same PUT
// again is fine.
func TestPropertiesFixedAtCreation(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	nic := *w.nic("rg", "nic", w.network("rg")).ID
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	base := func() armcompute.VirtualMachine {
		vm := linuxVM(nic, "data")
		vm.Zones = []*string{to.Ptr("1")}
		vm.Properties.OSProfile.ComputerName = to.Ptr("node-0")
		return vm
	}
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", base(), nil))
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", base(), nil))
	for _, tc := range []struct {
		property string
		change   func(*armcompute.VirtualMachine)
	}{
		{"imageReference", func(vm *armcompute.VirtualMachine) {
			vm.Properties.StorageProfile.ImageReference.Version = to.Ptr("130.3.20240717")
		}},
		{"imageReference", func(vm *armcompute.VirtualMachine) {
			vm.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{CommunityGalleryImageID: to.Ptr("/CommunityGalleries/" + capzGallery + "/Images/capi-ubun2-2404/Versions/1.36.3")}
		}},
		{"zones", func(vm *armcompute.VirtualMachine) { vm.Zones = []*string{to.Ptr("2")} }},
		{"osProfile.computerName", func(vm *armcompute.VirtualMachine) { vm.Properties.OSProfile.ComputerName = to.Ptr("node-1") }},
		{"osProfile.adminUsername", func(vm *armcompute.VirtualMachine) { vm.Properties.OSProfile.AdminUsername = to.Ptr("azureuser") }},
		{"customData", func(vm *armcompute.VirtualMachine) { vm.Properties.OSProfile.CustomData = to.Ptr("b3RoZXI=") }},
		{"osDisk.name", func(vm *armcompute.VirtualMachine) { vm.Properties.StorageProfile.OSDisk.Name = to.Ptr("another-disk") }},
	} {
		vm := base()
		tc.change(&vm)
		err := pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", vm, nil))
		re := azureCode(t, err, "PropertyChangeNotAllowed")
		if re.StatusCode != 409 || !strings.Contains(err.Error(), "Changing property '"+tc.property+"' is not allowed.") {
			t.Fatalf("%s: %v", tc.property, err)
		}
	}
	// What Azure does let change (tags, size) goes through.
	vm := base()
	vm.Tags = map[string]*string{"owner": to.Ptr("me")}
	vm.Properties.HardwareProfile.VMSize = to.Ptr(armcompute.VirtualMachineSizeTypes("Standard_D4s_v3"))
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", vm, nil))
}

// TestLocationsAndRegions: ARM refuses a location it does not offer, for a
// resource group and for a resource, a move of an existing resource, and
// references across regions.
func TestLocationsAndRegions(t *testing.T) {
	w := newWorld(t, nil)
	_, err := w.groups.CreateOrUpdate(w.ctx, "rg", armresources.ResourceGroup{Location: to.Ptr("mars")}, nil)
	re := azureCode(t, err, "LocationNotAvailableForResourceGroup")
	if re.StatusCode != 400 || !strings.Contains(err.Error(), "The provided location 'mars' is not available for resource group. List of available regions is '") || !strings.Contains(err.Error(), "westeurope") {
		t.Fatalf("status %d: %v", re.StatusCode, err)
	}
	// The portal's spelling of a location is the location.
	must(w.groups.CreateOrUpdate(w.ctx, "rg", armresources.ResourceGroup{Location: to.Ptr("West Europe")}, nil))
	pips := must(w.net.NewPublicIPAddressesClient(), nil)
	_, err = pips.BeginCreateOrUpdate(w.ctx, "rg", "ip", armnetwork.PublicIPAddress{Location: to.Ptr("mars")}, nil)
	re = azureCode(t, err, "LocationNotAvailableForResourceType")
	if re.StatusCode != 400 || !strings.Contains(err.Error(), "is not available for resource type 'Microsoft.Network/publicIPAddresses'") {
		t.Fatalf("status %d: %v", re.StatusCode, err)
	}
	done(pips.BeginCreateOrUpdate(w.ctx, "rg", "ip", armnetwork.PublicIPAddress{Location: to.Ptr(location)}, nil))
	_, err = pips.BeginCreateOrUpdate(w.ctx, "rg", "ip", armnetwork.PublicIPAddress{Location: to.Ptr("eastus")}, nil)
	azureCode(t, err, "InvalidResourceLocation")

	// A NIC in eastus on a westeurope subnet, a VM in eastus on a
	// westeurope NIC: references across regions resolve to nothing.
	subnet := w.network("rg")
	nics := must(w.net.NewInterfacesClient(), nil)
	_, err = nics.BeginCreateOrUpdate(w.ctx, "rg", "far-nic", armnetwork.Interface{Location: to.Ptr("eastus"), Properties: &armnetwork.InterfacePropertiesFormat{
		IPConfigurations: []*armnetwork.InterfaceIPConfiguration{{Name: to.Ptr("ipconfig1"), Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{Subnet: &armnetwork.Subnet{ID: to.Ptr(subnet)}}}},
	}}, nil)
	re = azureCode(t, err, "InvalidResourceReference")
	if re.StatusCode != 400 || !strings.Contains(err.Error(), "both resources are in the same region") {
		t.Fatalf("status %d: %v", re.StatusCode, err)
	}
	nic := w.nic("rg", "nic", subnet)
	vm := linuxVM(*nic.ID, "")
	vm.Location = to.Ptr("eastus")
	azureCode(t, pollErr(must(w.compute.NewVirtualMachinesClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "far-vm", vm, nil)), "InvalidResourceReference")
	// A scale set in another region than its subnet, likewise.
	ss := scaleSet(subnet, "far", "", 1)
	ss.Location = to.Ptr("eastus")
	azureCode(t, pollErr(must(w.compute.NewVirtualMachineScaleSetsClient(), nil).BeginCreateOrUpdate(w.ctx, "rg", "far-pool", ss, nil)), "InvalidResourceReference")
}
