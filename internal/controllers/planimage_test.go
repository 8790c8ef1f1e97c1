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
	stop := startControllers(t, armCfg)
	defer stop()
	az := newAzure(t, armCfg)
	f := newCluster(t, "plan")
	f.waitClusterProvisioned(time.Minute)
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
