package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// A pool on the default image keeps the build it was made of when the
// marketplace publishes a newer one: a manager that restarts (or whose
// image listing expires) after the publication does not roll every
// default-image pool. A Kubernetes upgrade still picks the newest build.
func TestDefaultImagePoolDoesNotRollOnANewBuild(t *testing.T) {
	parallel(t)
	f, mp, amp, az, stop := poolOnSupersededBuild(t, "newbuild", nil)
	defer stop()
	keepsItsBuild(t, f, mp, amp, az)

	// The Kubernetes version changes: the default is resolved again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
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

// A pool made before status.image existed (a winkube upgrade with pools
// already running on a default image) has no pin: the first one is the
// default image its scale set already runs, not the newest build, or the
// upgrade rolls every such pool.
func TestPoolWithoutPinAdoptsTheDefaultItRuns(t *testing.T) {
	parallel(t)
	f, mp, amp, az, stop := poolOnSupersededBuild(t, "unpinned", func(f *fixture, amp *infrav1.AzureMachinePool) {
		// What an older controller left: no status.image.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(amp), amp); err != nil {
				return err
			}
			amp.Status.Image = nil
			return env.Client.Status().Update(f.ctx, amp)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	defer stop()
	keepsItsBuild(t, f, mp, amp, az)
}

// poolOnSupersededBuild makes a one-instance pool on the default image
// (v1.28.12 is not in the community gallery: its default is the
// marketplace's newest 128.12.* build of ubuntu-2204-gen1), stops the
// controllers, publishes a newer build, lets between do what an upgrade
// left, and starts the controllers again.
func poolOnSupersededBuild(t *testing.T, name string, between func(*fixture, *infrav1.AzureMachinePool)) (*fixture, *clusterv1.MachinePool, *infrav1.AzureMachinePool, *azure, func()) {
	srv, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	az := newAzure(t, cfg)
	f := newCluster(t, name)
	f.waitClusterProvisioned(time.Minute)
	mp, amp := f.newPool(name+"-pool", 1, false, func(mp *clusterv1.MachinePool) { mp.Spec.Template.Spec.Version = "v1.28.12" })
	f.waitPool(amp, 1)
	if before := az.instances(f.ns, amp.Name); len(before) != 1 || before[0].imageVersion != "128.12.20240717" {
		t.Fatalf("instances before the new build: %+v, want one of 128.12.20240717", before)
	}
	stop()
	srv.PublishImage(arm.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2204-gen1", Version: "128.12.20241105", OS: "Linux"})
	if between != nil {
		between(f, amp)
	}
	return f, mp, amp, az, startControllers(t, cfg)
}

// keepsItsBuild scales the pool (a change applied without a new model) and
// checks that its model, its first instance and its pin stay on the build
// it was made of.
func keepsItsBuild(t *testing.T, f *fixture, mp *clusterv1.MachinePool, amp *infrav1.AzureMachinePool, az *azure) {
	t.Helper()
	first := az.instances(f.ns, amp.Name)[0].id
	setPoolReplicas(t, f, mp, 2)
	f.waitPool(amp, 2)
	set, err := az.vmss.Get(f.ctx, f.ns, amp.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := ptr.Deref(set.Properties.VirtualMachineProfile.StorageProfile.ImageReference.Version, ""); v != "128.12.20240717" {
		t.Errorf("the scale set's model moved to image %s when the marketplace published a newer build: the pool rolls", v)
	}
	after := az.instances(f.ns, amp.Name)
	if len(after) != 2 || after[0].id != first || !after[0].latest {
		t.Errorf("instances after the new build: %+v; want the first one (%s) kept and current", after, first)
	}
	if amp.Status.Image == nil || amp.Status.Image.Marketplace == nil || amp.Status.Image.Marketplace.Version != "128.12.20240717" {
		t.Errorf("status.image = %+v, want the pinned 128.12.20240717", amp.Status.Image)
	}
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
