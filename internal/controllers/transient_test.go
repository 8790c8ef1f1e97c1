package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
)

// Azure throttling the image listing is not the user's configuration: the
// machine says so, is retried with backoff, and is built once Azure
// answers again (before, it was parked as InvalidConfiguration until the
// resync, hours later).
func TestImageListingErrorsAreRetried(t *testing.T) {
	r := newRig(t, arm.Options{})
	f := r.cluster("imgretry")
	f.waitClusterProvisioned(time.Minute)
	attempts := r.armFaults(arm.Fault{Method: "GET", Kind: "communityGalleries", Percent: 100, Status: 429},
		arm.Fault{Method: "GET", Kind: "publishers", Percent: 100, Status: 429})
	f.newMachine("imgretry-md-0-aaaaa", false, false, "1")
	am := &infrav1.AzureMachine{}
	seen := int64(-1)
	poll.Until(t, time.Minute, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "imgretry-md-0-aaaaa"}, am); err != nil {
			return err.Error()
		}
		c := readyOf(am)
		if c == nil || !strings.Contains(c.Message, "choosing the image") {
			return "no image error yet"
		}
		if c.Reason == controllers.InvalidConfigurationReason {
			t.Fatalf("a throttled listing was taken for the user's configuration: %s", c.Message)
		}
		// The listing is tried again after the condition was written.
		if seen < 0 {
			seen = attempts()
			return "waiting for a retry"
		}
		if attempts() <= seen {
			return "not retried yet"
		}
		return ""
	})
	r.heal()
	f.waitMachinesProvisioned(time.Minute, "imgretry-md-0-aaaaa")
}

// A VM deleted outside winkube fails its machine for good: it is not made
// again with the old bootstrap data (whose join token has usually expired)
// and the machine says why, so that a MachineHealthCheck replaces it.
func TestAVanishedVMFailsTheMachine(t *testing.T) {
	r := newRig(t, arm.Options{})
	f := r.cluster("vanish")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("vanish-md-0-aaaaa", false, false, "1")
	am := f.waitMachinesProvisioned(time.Minute, "vanish-md-0-aaaaa")["vanish-md-0-aaaaa"]
	rg := f.ns
	p, err := r.az.vms.BeginDelete(context.Background(), rg, am.Status.VMName, nil)
	done(t, p, err)
	puts := r.emu.Counters()["PUT virtualMachines"]
	// Any change to the machine is reconciled; make one now.
	patch := client.MergeFrom(am.DeepCopy())
	am.Annotations = map[string]string{"test.winkube.dev/poke": "1"}
	if err := env.Client.Patch(context.Background(), am, patch); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		if c := readyOf(am); c == nil || c.Reason != controllers.VMDeletedReason {
			return "Ready is not VMDeleted"
		}
		return ""
	})
	if n := r.emu.Counters()["PUT virtualMachines"]; n != puts {
		t.Errorf("the VM was written again (%d PUTs) after it was deleted", n-puts)
	}
	if _, err := r.az.vms.Get(context.Background(), rg, am.Status.VMName, nil); err == nil {
		t.Error("the deleted VM exists again")
	}
	if am.Status.VMState != "Deleted" {
		t.Errorf("VM state %q", am.Status.VMState)
	}
}
