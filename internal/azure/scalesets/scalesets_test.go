package scalesets_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

func base() scalesets.Spec {
	return scalesets.Spec{ResourceGroup: "rg", Name: "pool", Location: "westeurope", Size: "Standard_D4s_v3", Capacity: 2, Windows: true,
		ComputerNamePrefix: "win-abcde", Image: virtualmachines.Image{CommunityGalleryImageID: "/CommunityGalleries/g/Images/capi-win-2022-containerd/Versions/1.36.3"},
		OSDiskSizeGB: 128, StorageAccountType: "Premium_LRS", CustomData: []byte("join token A"), AdminUsername: "capi",
		SubnetID: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/node", Zones: []string{"1", "2"},
		Tags: map[string]*string{"team": to.Ptr("a")}}
}

// Every field of the model the webhook lets change makes the scale set
// worth writing; new custom data (a rotated join token), the capacity and
// the order of zones do not.
func TestModelDigestCoversTheModelNotTheCustomData(t *testing.T) {
	want := scalesets.ModelDigest(base())
	for _, c := range []struct {
		name    string
		change  func(*scalesets.Spec)
		changes bool
	}{
		{"vmSize", func(s *scalesets.Spec) { s.Size = "Standard_D8s_v3" }, true},
		{"image version", func(s *scalesets.Spec) { s.Image.CommunityGalleryImageID += "x" }, true},
		{"marketplace image", func(s *scalesets.Spec) {
			s.Image = virtualmachines.Image{Publisher: "p", Offer: "o", SKU: "s", Version: "1"}
		}, true},
		{"OS disk size", func(s *scalesets.Spec) { s.OSDiskSizeGB = 256 }, true},
		{"OS disk storage type", func(s *scalesets.Spec) { s.StorageAccountType = "StandardSSD_LRS" }, true},
		{"zones", func(s *scalesets.Spec) { s.Zones = []string{"1"} }, true},
		{"a tag", func(s *scalesets.Spec) { s.Tags = map[string]*string{"team": to.Ptr("b")} }, true},
		{"subnet", func(s *scalesets.Spec) { s.SubnetID += "2" }, true},
		{"custom data (a new join token)", func(s *scalesets.Spec) { s.CustomData = []byte("join token B") }, false},
		{"OS disk caching", func(s *scalesets.Spec) { s.Caching = "ReadOnly" }, true},
		{"accelerated networking", func(s *scalesets.Spec) { s.Accelerated = true }, true},
		{"OS disk caching at Azure's default", func(s *scalesets.Spec) { s.Caching = "ReadWrite" }, false},
		{"capacity", func(s *scalesets.Spec) { s.Capacity = 5 }, false},
		{"zones in another order", func(s *scalesets.Spec) { s.Zones = []string{"2", "1"} }, false},
		{"the admin password (sent at creation only)", func(s *scalesets.Spec) { s.AdminPassword = "x" }, false},
	} {
		s := base()
		c.change(&s)
		if got := scalesets.ModelDigest(s) != want; got != c.changes {
			t.Errorf("%s: digest changed %v, want %v", c.name, got, c.changes)
		}
	}
}

// An instance is replaced when it runs another size, image, OS disk or
// zone, never because Azure says its model is not the latest.
func TestInstanceCurrent(t *testing.T) {
	spec := base()
	in := scalesets.Instance{Size: spec.Size, Image: spec.Image, OSDiskSizeGB: 128, StorageType: "Premium_LRS", Zone: "2", LatestModelApplied: false}
	if !in.Current(spec) {
		t.Error("an instance of the model's size, image, disk and zone, after a write of new custom data, is taken for outdated")
	}
	for name, change := range map[string]func(*scalesets.Instance){
		"size":         func(i *scalesets.Instance) { i.Size = "Standard_D2s_v3" },
		"image":        func(i *scalesets.Instance) { i.Image.CommunityGalleryImageID = "old" },
		"disk size":    func(i *scalesets.Instance) { i.OSDiskSizeGB = 64 },
		"storage type": func(i *scalesets.Instance) { i.StorageType = "Standard_LRS" },
		"zone":         func(i *scalesets.Instance) { i.Zone = "3" },
	} {
		i := in
		change(&i)
		if i.Current(spec) {
			t.Errorf("an instance of another %s is taken for current", name)
		}
	}
}

// An instance's image as ARM returns it: no thirdPartyImage flag, and a
// gallery image's ID in the case ARM keeps (the resource group of a
// private gallery, for one).
func TestInstanceCurrentComparesTheImageAsARMReturnsIt(t *testing.T) {
	plan := base()
	plan.Image = virtualmachines.Image{Publisher: "resf", Offer: "rockylinux-x86_64", SKU: "9-base", Version: "9.8.20260525", ThirdParty: true}
	gallery := base()
	gallery.Image = virtualmachines.Image{ID: "/subscriptions/s/resourceGroups/Images-RG/providers/Microsoft.Compute/galleries/g/images/win/versions/1.36.3"}
	for name, tc := range map[string]struct {
		spec scalesets.Spec
		got  virtualmachines.Image
	}{
		"plan image":    {plan, virtualmachines.Image{Publisher: "resf", Offer: "rockylinux-x86_64", SKU: "9-base", Version: "9.8.20260525"}},
		"gallery image": {gallery, virtualmachines.Image{ID: "/subscriptions/s/resourceGroups/images-rg/providers/Microsoft.Compute/galleries/g/images/win/versions/1.36.3"}},
	} {
		in := scalesets.Instance{Size: tc.spec.Size, Image: tc.got, OSDiskSizeGB: 128, StorageType: "Premium_LRS", Zone: "2"}
		if !in.Current(tc.spec) {
			t.Errorf("%s: an instance of the model's image, as ARM returns it, is taken for outdated", name)
		}
	}
}

// A scale set is written when it is missing, when its model differs or its
// capacity is lower, and not for new custom data alone, nor to lower its
// capacity (Azure would choose the instances to remove); the admin password
// goes only with the create.
func TestParameters(t *testing.T) {
	spec := base()
	spec.AdminPassword = "p"
	created, err := spec.Parameters(nil)
	if err != nil || created == nil || created.Properties.VirtualMachineProfile.OSProfile.AdminPassword == nil {
		t.Fatalf("a missing scale set is not created with its password: %v", err)
	}
	if p := created.Properties; p.Overprovision == nil || *p.Overprovision || p.SinglePlacementGroup == nil || *p.SinglePlacementGroup {
		t.Fatal("the scale set would over-provision (extra VMs join and vanish) or be held to one placement group of 100 VMs")
	}
	provisioned := func(change func(*scalesets.Spec)) *armcompute.VirtualMachineScaleSet {
		s := base()
		change(&s)
		m, _ := s.Parameters(nil)
		m.Properties.ProvisioningState = to.Ptr("Succeeded")
		return m
	}
	for _, tc := range []struct {
		name     string
		existing *armcompute.VirtualMachineScaleSet
		write    bool
	}{
		{"as wanted", provisioned(func(*scalesets.Spec) {}), false},
		{"only the custom data differs (a rotated join token)", provisioned(func(s *scalesets.Spec) { s.CustomData = []byte("join token B") }), false},
		{"a lower capacity", provisioned(func(s *scalesets.Spec) { s.Capacity = 1 }), true},
		{"a higher capacity", provisioned(func(s *scalesets.Spec) { s.Capacity = 3 }), false},
		{"another size", provisioned(func(s *scalesets.Spec) { s.Size = "Standard_D8s_v3" }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if azuretest.Writes(t, body, err, tc.write) && body.Properties.VirtualMachineProfile.OSProfile.AdminPassword != nil {
				t.Fatal("an update resends the admin password")
			}
		})
	}
}

// Naming a third-party image's plan changes the model; the scale set of a
// marketplace image then names the plan.
func TestThirdPartyImagePlan(t *testing.T) {
	s := base()
	s.Image = virtualmachines.Image{Publisher: "resf", Offer: "rockylinux-x86_64", SKU: "9-base", Version: "9.8.20260525"}
	plain := scalesets.ModelDigest(s)
	s.Image.ThirdParty = true
	if scalesets.ModelDigest(s) == plain {
		t.Fatal("the plan does not change the model digest")
	}
	body, err := s.Parameters(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := body.Plan; p == nil || *p.Name != "9-base" || *p.Product != "rockylinux-x86_64" || *p.Publisher != "resf" {
		t.Fatalf("plan %+v", body.Plan)
	}
}
