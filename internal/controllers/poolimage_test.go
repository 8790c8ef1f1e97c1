package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// A pool on the default image keeps the build it was made of when the
// marketplace publishes a newer one: a manager that restarts (or whose
// image listing expires) after the publication does not roll every
// default-image pool. A Kubernetes upgrade still picks the newest build.
func TestDefaultImagePoolDoesNotRollOnANewBuild(t *testing.T) {
	srv, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	az := newAzure(t, cfg)
	f := newCluster(t, "newbuild")
	f.waitClusterProvisioned(time.Minute)
	// v1.28.12 is not in the community gallery: its default is the
	// marketplace's newest 128.12.* build of ubuntu-2204-gen1.
	mp, amp := f.newPool("newbuild-pool", 1, false, func(mp *clusterv1.MachinePool) { mp.Spec.Template.Spec.Version = "v1.28.12" })
	f.waitPool(amp, 1)
	before := az.instances(f.ns, "newbuild-pool")
	if len(before) != 1 || before[0].imageVersion != "128.12.20240717" {
		t.Fatalf("instances before the new build: %+v, want one of 128.12.20240717", before)
	}
	stop()

	srv.PublishImage(arm.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2204-gen1", Version: "128.12.20241105", OS: "Linux"})
	stop = startControllers(t, cfg)
	defer stop()
	// A change the pool applies without a new model: its capacity.
	setPoolReplicas(t, f, mp, 2)
	f.waitPool(amp, 2)
	set, err := az.vmss.Get(f.ctx, f.ns, "newbuild-pool", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := ptr.Deref(set.Properties.VirtualMachineProfile.StorageProfile.ImageReference.Version, ""); v != "128.12.20240717" {
		t.Errorf("the scale set's model moved to image %s when the marketplace published a newer build: the pool rolls", v)
	}
	after := az.instances(f.ns, "newbuild-pool")
	if len(after) != 2 || after[0].id != before[0].id || !after[0].latest {
		t.Errorf("instances after the new build: %+v; want the first one (%s) kept and current", after, before[0].id)
	}
	if amp.Status.Image == nil || amp.Status.Image.Marketplace == nil || amp.Status.Image.Marketplace.Version != "128.12.20240717" {
		t.Errorf("status.image = %+v, want the pinned 128.12.20240717", amp.Status.Image)
	}

	// The Kubernetes version changes: the default is resolved again.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
			return err
		}
		mp.Spec.Template.Spec.Version = "v1.28.11"
		return env.Client.Update(f.ctx, mp)
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, func() string {
		set, err := az.vmss.Get(f.ctx, f.ns, "newbuild-pool", nil)
		if err != nil {
			return err.Error()
		}
		if v := ptr.Deref(set.Properties.VirtualMachineProfile.StorageProfile.ImageReference.Version, ""); v != "128.11.20240612" {
			return fmt.Sprintf("the scale set's model is at image %s, want 128.11.20240612 for Kubernetes v1.28.11", v)
		}
		return ""
	})
}

func setPoolReplicas(t *testing.T, f *fixture, mp *clusterv1.MachinePool, n int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
			return err
		}
		mp.Spec.Replicas = ptr.To(n)
		return env.Client.Update(f.ctx, mp)
	})
	if err != nil {
		t.Fatal(err)
	}
}
