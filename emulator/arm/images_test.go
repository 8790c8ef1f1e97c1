package arm_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
)

const capzGallery = "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019"

// urns lists every URN of an offer, as az vm image list --all does: the
// SKUs, then each SKU's versions.
func (w *world) urns(publisher, offer string) map[string]bool {
	imgs := must(w.compute.NewVirtualMachineImagesClient(), nil)
	out := map[string]bool{}
	for _, sku := range must(imgs.ListSKUs(w.ctx, location, publisher, offer, nil)).VirtualMachineImageResourceArray {
		for _, v := range must(imgs.List(w.ctx, location, publisher, offer, *sku.Name, nil)).VirtualMachineImageResourceArray {
			out[publisher+":"+offer+":"+*sku.Name+":"+*v.Name] = true
		}
	}
	return out
}

func TestImageCatalogIsThePublishedImages(t *testing.T) {
	w := newWorld(t, nil)
	win := w.urns("cncf-upstream", "capi-windows")
	for _, urn := range []string{
		// The seeds' az vm image list tables.
		"cncf-upstream:capi-windows:k8s-1dot18dot13-windows-2019:2020.12.11",
		"cncf-upstream:capi-windows:k8s-1dot19dot5-windows-2019:2020.12.11",
		"cncf-upstream:capi-windows:k8s-1dot20dot0-windows-2019:2020.12.11",
		"cncf-upstream:capi-windows:k8s-1dot22dot1-windows-2019-containerd:2021.10.15",
		"cncf-upstream:capi-windows:k8s-1dot22dot2-windows-2019-containerd:2021.10.15",
		// CAPZ's Windows Server 2019 marketplace versions.
		"cncf-upstream:capi-windows:windows-2019-containerd-gen1:128.12.20240717",
	} {
		if !win[urn] {
			t.Errorf("capi-windows lacks %s", urn)
		}
	}
	if linux := w.urns("cncf-upstream", "capi"); !linux["cncf-upstream:capi:ubuntu-2204-gen1:130.3.20240717"] || len(linux) != 26 {
		t.Errorf("capi offer has %d URNs, want CAPZ's 26 ubuntu-2204-gen1 versions", len(linux))
	}
	// An invented version is not there: the catalog is data, not a rule.
	if win["cncf-upstream:capi-windows:windows-2022-containerd-gen1:136.3.20260424"] {
		t.Error("the catalog holds a version nobody published")
	}
	imgs := must(w.compute.NewVirtualMachineImagesClient(), nil)
	v := must(imgs.Get(w.ctx, location, "cncf-upstream", "capi-windows", "k8s-1dot22dot1-windows-2019-containerd", "2021.10.15", nil))
	if *v.Properties.OSDiskImage.OperatingSystem != armcompute.OperatingSystemTypesWindows {
		t.Fatalf("image OS %s, want Windows", *v.Properties.OSDiskImage.OperatingSystem)
	}

	// The community gallery: CAPZ's image definitions, each with its osType,
	// and versions named after Kubernetes releases.
	defs := must(w.compute.NewCommunityGalleryImagesClient(), nil)
	oses := map[string]armcompute.OperatingSystemTypes{}
	p := defs.NewListPager(location, capzGallery, nil)
	for p.More() {
		for _, d := range must(p.NextPage(w.ctx)).Value {
			oses[*d.Name] = *d.Properties.OSType
		}
	}
	want := map[string]armcompute.OperatingSystemTypes{
		"capi-ubun2-2404": armcompute.OperatingSystemTypesLinux, "capi-win-2019-containerd": armcompute.OperatingSystemTypesWindows,
		"capi-win-2022-containerd": armcompute.OperatingSystemTypesWindows, "capi-win-2025-containerd": armcompute.OperatingSystemTypesWindows,
	}
	for name, os := range want {
		if oses[name] != os {
			t.Errorf("gallery image %s has OS %q, want %s", name, oses[name], os)
		}
	}
	versions := must(w.compute.NewCommunityGalleryImageVersionsClient(), nil)
	var names []string
	vp := versions.NewListPager(location, capzGallery, "capi-win-2022-containerd", nil)
	for vp.More() {
		for _, v := range must(vp.NextPage(w.ctx)).Value {
			names = append(names, *v.Name)
		}
	}
	joined := "," + strings.Join(names, ",") + ","
	for _, v := range []string{"1.30.4", "1.31.1", "1.36.3"} {
		if !strings.Contains(joined, ","+v+",") {
			t.Errorf("capi-win-2022-containerd lacks version %s (has %s)", v, joined)
		}
	}
	_, err := versions.Get(w.ctx, location, capzGallery, "capi-win-2022-containerd", "1.99.0", nil)
	azureCode(t, err, "GalleryImageNotFound")
	// A location Azure does not have serves no catalog.
	_, err = imgs.ListSKUs(w.ctx, "atlantis", "cncf-upstream", "capi", nil)
	azureCode(t, err, "NoRegisteredProviderFound")
}

// TestMissingImagesAreRefused: every kind of image reference is checked
// against what exists in the VM's region, with the code Azure answers.
func TestMissingImagesAreRefused(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	nic := w.nic("rg", "nic", w.network("rg"))
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	withImage := func(ref *armcompute.ImageReference) armcompute.VirtualMachine {
		vm := linuxVM(*nic.ID, "")
		vm.Properties.StorageProfile.ImageReference = ref
		return vm
	}
	managed := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Compute/images/golden"
	for _, tc := range []struct {
		name   string
		ref    *armcompute.ImageReference
		code   string
		status int
	}{
		{"marketplace version nobody published", &armcompute.ImageReference{Publisher: to.Ptr("cncf-upstream"), Offer: to.Ptr("capi"), SKU: to.Ptr("ubuntu-2204-gen1"), Version: to.Ptr("136.3.20260424")}, "PlatformImageNotFound", 404},
		{"latest of a SKU that does not exist", &armcompute.ImageReference{Publisher: to.Ptr("cncf-upstream"), Offer: to.Ptr("capi"), SKU: to.Ptr("ubuntu-2404-gen1"), Version: to.Ptr("latest")}, "PlatformImageNotFound", 404},
		{"managed image that does not exist", &armcompute.ImageReference{ID: to.Ptr(managed)}, "NotFound", 404},
		{"private gallery version that does not exist", &armcompute.ImageReference{ID: to.Ptr("/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/i/versions/1.0.0")}, "GalleryImageNotFound", 404},
		{"community gallery version not published", &armcompute.ImageReference{CommunityGalleryImageID: to.Ptr("/CommunityGalleries/" + capzGallery + "/Images/capi-ubun2-2404/Versions/1.29.0")}, "GalleryImageNotFound", 404},
		{"community gallery image that does not exist", &armcompute.ImageReference{CommunityGalleryImageID: to.Ptr("/CommunityGalleries/" + capzGallery + "/Images/capi-win-2016-containerd/Versions/1.36.3")}, "GalleryImageNotFound", 404},
		{"latest of a community image that does not exist", &armcompute.ImageReference{CommunityGalleryImageID: to.Ptr("/CommunityGalleries/" + capzGallery + "/Images/capi-win-2016-containerd/Versions/latest")}, "InvalidParameter", 400},
		{"shared gallery nobody shared", &armcompute.ImageReference{SharedGalleryImageID: to.Ptr("/SharedGalleries/abc-def/Images/img/Versions/1.0.0")}, "GalleryImageNotFound", 404},
		{"no image at all", nil, "InvalidParameter", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bind(t)
			re := azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "vm", withImage(tc.ref), nil)), tc.code)
			if re.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", re.StatusCode, tc.status)
			}
		})
	}

	// A managed image that exists serves, and its osType decides the OS:
	// the name says nothing of Windows.
	images := must(w.compute.NewImagesClient(), nil)
	done(images.BeginCreateOrUpdate(w.ctx, "rg", "golden", armcompute.Image{Location: to.Ptr(location), Properties: &armcompute.ImageProperties{
		StorageProfile: &armcompute.ImageStorageProfile{OSDisk: &armcompute.ImageOSDisk{OSType: to.Ptr(armcompute.OperatingSystemTypesWindows), OSState: to.Ptr(armcompute.OperatingSystemStateTypesGeneralized)}},
	}}, nil))
	vm := windowsVM(*nic.ID, "golden-0", "")
	vm.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{ID: to.Ptr(managed)}
	vm.Properties.StorageProfile.OSDisk.OSType = nil
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "golden-0", vm, nil))
	if m := waitRunning(t, w.rt, 1)[0]; m.OS != "Windows" {
		t.Fatalf("VM from a Windows managed image runs %s", m.OS)
	}
}

// TestOSComesFromTheImage: the community gallery's osType makes a VM
// Windows, however it is named and whatever its OS disk claims.
func TestOSComesFromTheImage(t *testing.T) {
	w := newWorld(t, nil)
	w.group("rg")
	subnet := w.network("rg")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	vm := windowsVM(*w.nic("rg", "a", subnet).ID, "node-a", "")
	vm.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{CommunityGalleryImageID: to.Ptr("/CommunityGalleries/" + capzGallery + "/Images/capi-win-2019-containerd/Versions/1.36.3")}
	vm.Properties.StorageProfile.OSDisk.OSType = nil
	got := done(vms.BeginCreateOrUpdate(w.ctx, "rg", "node-a", vm, nil)).VirtualMachine
	if *got.Properties.StorageProfile.OSDisk.OSType != armcompute.OperatingSystemTypesWindows {
		t.Fatalf("OS disk type %s, want Windows from the gallery image", *got.Properties.StorageProfile.OSDisk.OSType)
	}
	// A Linux image with a Windows-sounding name and a wrong osType is Linux.
	lin := linuxVM(*w.nic("rg", "b", subnet).ID, "")
	lin.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{CommunityGalleryImageID: to.Ptr("/CommunityGalleries/" + capzGallery + "/Images/capi-ubun2-2404/Versions/latest")}
	lin.Properties.StorageProfile.OSDisk.OSType = to.Ptr(armcompute.OperatingSystemTypesWindows)
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "windows-looking", lin, nil))
	oses := map[string]string{}
	for _, m := range waitRunning(t, w.rt, 2) {
		oses[m.Name] = m.OS
	}
	if oses["node-a"] != "Windows" || oses["windows-looking"] != "Linux" {
		t.Fatalf("machines' OS %v, want node-a Windows and windows-looking Linux", oses)
	}
	// The OS disk is the image's size unless asked bigger; smaller is refused.
	disk := must(must(w.compute.NewDisksClient(), nil).Get(w.ctx, "rg", *got.Properties.StorageProfile.OSDisk.Name, nil))
	if *disk.Properties.DiskSizeGB != 128 {
		t.Fatalf("OS disk %d GB, want the 128 asked", *disk.Properties.DiskSizeGB)
	}
	small := windowsVM(*w.nic("rg", "c", subnet).ID, "node-c", "")
	small.Properties.StorageProfile.OSDisk.DiskSizeGB = to.Ptr[int32](64)
	re := azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "node-c", small, nil)), "OperationNotAllowed")
	if re.StatusCode != http.StatusConflict || !strings.Contains(re.Error(), "smaller than the size of the corresponding disk in the VM image: 127 GB") {
		t.Fatalf("status %d: %v", re.StatusCode, re)
	}
	small.Properties.StorageProfile.OSDisk.DiskSizeGB = nil
	defaulted := done(vms.BeginCreateOrUpdate(w.ctx, "rg", "node-c", small, nil)).VirtualMachine
	if *defaulted.Properties.StorageProfile.OSDisk.DiskSizeGB != 127 {
		t.Fatalf("OS disk with no size asked is %d GB, want the image's 127", *defaulted.Properties.StorageProfile.OSDisk.DiskSizeGB)
	}
}

// An image sold through a purchase plan says so in its metadata; a VM made
// from it without naming the plan fails to provision, as on Azure, and one
// that names it runs. A scale set likewise.
func TestThirdPartyImagesNeedTheirPlan(t *testing.T) {
	w := newWorld(t, nil)
	imgs := must(w.compute.NewVirtualMachineImagesClient(), nil)
	v := must(imgs.Get(w.ctx, location, "resf", "rockylinux-x86_64", "9-base", "9.8.20260525", nil))
	if p := v.Properties.Plan; p == nil || *p.Name != "9-base" || *p.Product != "rockylinux-x86_64" || *p.Publisher != "resf" {
		t.Fatalf("the image's plan: %+v", v.Properties.Plan)
	}
	w.group("rg")
	subnet := w.network("rg")
	vms := must(w.compute.NewVirtualMachinesClient(), nil)
	rocky := func(name string, plan *armcompute.Plan) armcompute.VirtualMachine {
		vm := linuxVM(*w.nic("rg", name+"-nic", subnet).ID, "#cloud-config\n")
		vm.Properties.StorageProfile.ImageReference = &armcompute.ImageReference{Publisher: to.Ptr("resf"), Offer: to.Ptr("rockylinux-x86_64"), SKU: to.Ptr("9-base"), Version: to.Ptr("9.8.20260525")}
		vm.Plan = plan
		return vm
	}
	azureCode(t, pollErr(vms.BeginCreateOrUpdate(w.ctx, "rg", "noplan", rocky("noplan", nil), nil)), "VMMarketplaceInvalidInput")
	if got := *must(vms.Get(w.ctx, "rg", "noplan", nil)).Properties.ProvisioningState; got != "Failed" {
		t.Fatalf("a VM without its image's plan is %s", got)
	}
	done(vms.BeginCreateOrUpdate(w.ctx, "rg", "withplan", rocky("withplan", &armcompute.Plan{Name: to.Ptr("9-base"), Product: to.Ptr("rockylinux-x86_64"), Publisher: to.Ptr("resf")}), nil))

	sets := must(w.compute.NewVirtualMachineScaleSetsClient(), nil)
	pool := scaleSet(subnet, "rocky", "", 1)
	pool.Properties.VirtualMachineProfile.StorageProfile.ImageReference = &armcompute.ImageReference{Publisher: to.Ptr("resf"), Offer: to.Ptr("rockylinux-x86_64"), SKU: to.Ptr("9-base"), Version: to.Ptr("9.8.20260525")}
	pool.Properties.VirtualMachineProfile.StorageProfile.OSDisk.OSType = to.Ptr(armcompute.OperatingSystemTypesLinux)
	pool.Properties.VirtualMachineProfile.OSProfile.WindowsConfiguration = nil
	pool.Properties.VirtualMachineProfile.OSProfile.AdminPassword = nil
	pool.Properties.VirtualMachineProfile.OSProfile.LinuxConfiguration = linuxVM("", "").Properties.OSProfile.LinuxConfiguration
	azureCode(t, pollErr(sets.BeginCreateOrUpdate(w.ctx, "rg", "rocky", pool, nil)), "VMMarketplaceInvalidInput")
	pool.Plan = &armcompute.Plan{Name: to.Ptr("9-base"), Product: to.Ptr("rockylinux-x86_64"), Publisher: to.Ptr("resf")}
	done(sets.BeginCreateOrUpdate(w.ctx, "rg", "rocky2", pool, nil))
}
