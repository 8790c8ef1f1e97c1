package controllers_test

import (
	"testing"
	"time"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// TestPoolOnAPlanImageKeepsItsInstances: a pool on a third-party
// marketplace image (the emulator's catalog sells Rocky Linux through a
// purchase plan) settles with its first instance. ARM reports an
// instance's image without the pool's thirdPartyImage flag, and a
// comparison that counted it took every instance for outdated and replaced
// it, forever.
func TestPoolOnAPlanImageKeepsItsInstances(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	f, az := provisionedCluster(t, "plan")
	tmpl := infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", Image: &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{
		Publisher: "resf", Offer: "rockylinux-x86_64", SKU: "9-base", Version: "9.8.20260525", ThirdPartyImage: true}}}
	_, amp := f.newPoolOf("plan-pool", 1, tmpl)
	f.waitPool(amp, 1)
	if got := instanceIDs(az.instances(f.ns, "plan-pool")); got != "0" {
		t.Fatalf("instances %s, want the first (0) only: the pool replaced it", got)
	}
	inst, err := az.vmssVMs.Get(f.ctx, f.ns, "plan-pool", "0", nil)
	if err != nil || inst.Plan == nil {
		t.Fatalf("instance 0 plan %+v (%v): ARM names the plan on each instance", inst.Plan, err)
	}
	set, err := az.vmss.Get(f.ctx, f.ns, "plan-pool", nil)
	if err != nil || set.Plan == nil || *set.Plan.Name != "9-base" {
		t.Fatalf("scale set plan %+v (%v), want the image's", set.Plan, err)
	}
}

// TestGalleryImageWithAPlanGivesTheVMThePlan: an image built from a
// marketplace image sold through a plan keeps needing it; the gallery
// image's plan goes on the VM (and on a pool's scale set), as CAPZ's
// computeGallery.plan does.
func TestGalleryImageWithAPlanGivesTheVMThePlan(t *testing.T) {
	parallel(t)
	stop := startControllers(t, armCfg)
	defer stop()
	f, az := provisionedCluster(t, "gplan")
	img := &infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: "ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019", Name: "capi-ubun2-2404", Version: "1.36.3",
		Plan: &infrav1.ImagePlan{Publisher: "resf", Offer: "rockylinux-x86_64", SKU: "9-base"}}}
	f.newMachineWith("gplan-md-linux-abcde", false, false, "1", nil, func(s *infrav1.AzureMachineSpec) { s.Image = img })
	f.waitMachinesProvisioned(time.Minute, "gplan-md-linux-abcde")
	vm, err := az.vms.Get(f.ctx, f.ns, "gplan-md-linux-abcde", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := vm.Plan; p == nil || *p.Name != "9-base" || *p.Product != "rockylinux-x86_64" || *p.Publisher != "resf" {
		t.Fatalf("VM plan %+v, want the gallery image's", vm.Plan)
	}
}
