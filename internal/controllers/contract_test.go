package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
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
	parallel(t)
	r := newRig(t, arm.Options{})
	f := r.cluster("imgretry")
	f.waitClusterProvisioned(time.Minute)
	attempts := r.armFaults(arm.Fault{Method: "GET", Kind: "communityGalleries", Percent: 100, Status: 429},
		arm.Fault{Method: "GET", Kind: "publishers", Percent: 100, Status: 429})
	f.newMachine("imgretry-md-0-aaaaa", false, false, "1")
	am := &infrav1.AzureMachine{}
	seen := int64(-1)
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "imgretry-md-0-aaaaa"}, am); err != nil {
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
	parallel(t)
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
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(context.Background(), client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		// The patch writes the conditions and the rest of the status in
		// two requests: both are waited for.
		if c := readyOf(am); c == nil || c.Reason != controllers.VMDeletedReason || am.Status.VMState != "Deleted" {
			return fmt.Sprintf("Ready is not VMDeleted, or the VM state %q is not Deleted", am.Status.VMState)
		}
		return ""
	})
	if n := r.emu.Counters()["PUT virtualMachines"]; n != puts {
		t.Errorf("the VM was written again (%d PUTs) after it was deleted", n-puts)
	}
	if _, err := r.az.vms.Get(context.Background(), rg, am.Status.VMName, nil); err == nil {
		t.Error("the deleted VM exists again")
	}
	// The machine's Events tell its story: made, then lost.
	env.Until(t, time.Minute, func(r client.Reader) string {
		evs := &corev1.EventList{}
		if err := r.List(context.Background(), evs, client.InNamespace(f.ns)); err != nil {
			return err.Error()
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == am.Name {
				seen[e.Reason] = true
			}
		}
		if !seen["VMCreated"] || !seen[controllers.VMDeletedReason] {
			return fmt.Sprintf("events of the machine: %v", seen)
		}
		return ""
	})
}

// clusterctl move creates the objects in the target cluster without their
// status. A machine deleted there before any reconcile rebuilt it still
// deletes what it made, from the records its annotations carry.
func TestAMachineMovedWithoutItsStatusDeletesWhatItMade(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	f := r.cluster("moved")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("moved-control-plane-aaaaa", true, false, "1")
	am := f.waitMachinesProvisioned(time.Minute, "moved-control-plane-aaaaa")["moved-control-plane-aaaaa"]
	vm := am.Status.VMName
	if am.Annotations[controllers.CreatedResourcesAnnotation] == "" {
		t.Fatal("the machine's records are not in its annotations")
	}
	// What the target cluster gets: the object, annotations included,
	// without status; paused, as clusterctl move leaves it until the end.
	setClusterPaused(t, f.cluster, true)
	wiped := am.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(am), wiped); err != nil {
			return err
		}
		wiped.Status = infrav1.AzureMachineStatus{}
		return env.Client.Status().Update(context.Background(), wiped)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), wiped); err != nil {
		t.Fatal(err)
	}
	setClusterPaused(t, f.cluster, false)
	waitGone(t, wiped)
	r.noneLeftOf(f.ns, vm)
}

// clusterctl move makes each object again in the target without its
// deletionTimestamp. A machine moved while Azure was deleting its VM fails
// at once, saying so, and never makes the VM again; deleted again, it
// resumes that same delete and then deletes the rest of what it made.
func TestAMachineMovedWhileBeingDeletedFails(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	ctx := context.Background()
	f := r.cluster("middel")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("middel-md-0-aaaaa", false, false, "1")
	am := f.waitMachinesProvisioned(time.Minute, "middel-md-0-aaaaa")["middel-md-0-aaaaa"]
	vm := am.Status.VMName
	r.emu.SetFaults(arm.FaultConfig{Faults: []arm.Fault{{Method: "DELETE", Kind: "virtualMachines", OperationDelay: 5 * time.Second}}})
	if err := env.Client.Delete(ctx, am); err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		if !strings.Contains(am.Annotations[controllers.OperationsAnnotation], `"type":"DELETE","serviceName":"virtualmachines"`) {
			return "the VM's delete is not under way: " + am.Annotations[controllers.OperationsAnnotation]
		}
		return ""
	})
	// What clusterctl move does: pause, copy (metadata and spec, no status,
	// no deletionTimestamp), drop the source's finalizers and delete it,
	// unpause.
	setClusterPaused(t, f.cluster, true)
	moved := &infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Name: am.Name, Namespace: am.Namespace, Labels: am.Labels,
		Annotations: am.Annotations, OwnerReferences: am.OwnerReferences, Finalizers: am.Finalizers}, Spec: am.Spec}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err
		}
		am.Finalizers = nil
		return env.Client.Update(ctx, am)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, am)
	if err := env.Client.Create(ctx, moved); err != nil {
		t.Fatal(err)
	}
	setClusterPaused(t, f.cluster, false)
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(ctx, client.ObjectKeyFromObject(moved), moved); err != nil {
			return err.Error()
		}
		c := readyOf(moved)
		if c == nil || c.Reason != controllers.VMDeletedReason {
			return fmt.Sprintf("the moved machine: %+v", c)
		}
		return ""
	})
	if !strings.Contains(readyOf(moved).Message, "was being deleted when this machine was moved") {
		t.Errorf("the moved machine's condition does not say why: %s", readyOf(moved).Message)
	}
	if err := env.Client.Delete(ctx, moved); err != nil {
		t.Fatal(err)
	}
	waitGone(t, moved)
	r.noneLeftOf(f.ns, vm)
	if n := r.emu.Counters()["PUT virtualMachines"]; n != 1 {
		t.Errorf("%d PUTs of VMs, want the one that made it", n)
	}
}

// A cluster in a user's VNet, moved without its status, still knows the
// subnets it added as its own: it neither refuses them (ResourceNotOwned)
// nor leaves them behind when it is deleted.
func TestAClusterMovedWithoutItsStatusKeepsItsSubnets(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	ctx := context.Background()
	const rg = "moved-user-rg"
	_, _, vnets := userNetwork(t, r, rg, "user-vnet", "user-subnet", "10.4.0.0/24", "user-nsg")
	f := r.cluster("movu", func(s *infrav1.AzureClusterSpec) {
		s.ResourceGroup = rg
		s.NetworkSpec.Vnet = infrav1.VnetSpec{Name: "user-vnet", CIDRBlocks: []string{"10.0.0.0/12"}}
		s.NetworkSpec.Subnets = []infrav1.SubnetSpec{
			{Name: "movu-cp", Role: infrav1.SubnetControlPlane, CIDRBlocks: []string{"10.0.0.0/16"}},
			{Name: "movu-nodes", Role: infrav1.SubnetNode, CIDRBlocks: []string{"10.1.0.0/16"}},
		}
	})
	f.waitClusterProvisioned(time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ac := &infrav1.AzureCluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.ac), ac); err != nil {
			return err
		}
		ac.Status = infrav1.AzureClusterStatus{}
		return env.Client.Status().Update(ctx, ac)
	})
	if err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		ac := &infrav1.AzureCluster{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(f.ac), ac); err != nil {
			return err.Error()
		}
		c := readyOf(ac)
		if c != nil && c.Reason == controllers.ResourceNotOwnedReason {
			t.Fatalf("the moved cluster refuses its own subnets: %s", c.Message)
		}
		if c == nil || c.Status != metav1.ConditionTrue || len(ac.Status.CreatedResources) != 2 {
			return fmt.Sprintf("not provisioned again: %+v, records %v", c, ac.Status.CreatedResources)
		}
		return ""
	})
	if err := env.Client.Delete(ctx, f.ac); err != nil {
		t.Fatal(err)
	}
	waitGone(t, f.ac)
	v, err := vnets.Get(ctx, rg, "user-vnet", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Properties.Subnets) != 1 || *v.Properties.Subnets[0].Name != "user-subnet" {
		t.Errorf("the user's VNet should hold only the user's subnet again: %s", mustJSON(t, v.Properties.Subnets))
	}
}

// Cluster API's pause contract: a paused Cluster's objects say so with
// their Paused condition and are left alone; unpausing (the end of
// clusterctl move) resumes them at once, not at the next resync.
func TestPauseAndUnpause(t *testing.T) {
	parallel(t)
	r := newRig(t, arm.Options{})
	ctx := context.Background()
	f := r.cluster("pause")
	f.waitClusterProvisioned(time.Minute)
	f.newMachine("pause-md-0-aaaaa", false, false, "1")
	f.waitMachinesProvisioned(time.Minute, "pause-md-0-aaaaa")
	setPaused := func(p bool) { t.Helper(); setClusterPaused(t, f.cluster, p) }
	pausedOf := func(obj client.Object) metav1.ConditionStatus {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return ""
		}
		for _, c := range obj.(interface{ GetConditions() []metav1.Condition }).GetConditions() {
			if c.Type == clusterv1.PausedCondition {
				return c.Status
			}
		}
		return ""
	}
	am := &infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "pause-md-0-aaaaa"}}
	setPaused(true)
	poll.Until(t, time.Minute, func() string {
		if a, m := pausedOf(f.ac), pausedOf(am); a != metav1.ConditionTrue || m != metav1.ConditionTrue {
			return fmt.Sprintf("Paused: AzureCluster %q, AzureMachine %q", a, m)
		}
		return ""
	})
	// A change made while paused is applied once the Cluster is unpaused.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ac := &infrav1.AzureCluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.ac), ac); err != nil {
			return err
		}
		for i := range ac.Spec.NetworkSpec.Subnets {
			if sn := &ac.Spec.NetworkSpec.Subnets[i]; sn.Role == infrav1.SubnetNode {
				sn.SecurityGroup.SecurityRules = append(sn.SecurityGroup.SecurityRules, infrav1.SecurityRule{
					Name: "allow_while_paused", Protocol: "Tcp", Direction: "Inbound", Priority: 2400, DestinationPorts: "9999"})
			}
		}
		return env.Client.Update(ctx, ac)
	})
	if err != nil {
		t.Fatal(err)
	}
	ruleWritten := func() bool {
		for _, id := range r.emu.ResourceIDs() {
			if strings.HasSuffix(strings.ToLower(id), "/securityrules/allow_while_paused") {
				return true
			}
		}
		return false
	}
	setPaused(false)
	poll.Until(t, time.Minute, func() string {
		if a, m := pausedOf(f.ac), pausedOf(am); a != metav1.ConditionFalse || m != metav1.ConditionFalse {
			return fmt.Sprintf("Paused: AzureCluster %q, AzureMachine %q", a, m)
		}
		if !ruleWritten() {
			return "the change made while paused is not in Azure"
		}
		return ""
	})
}

// setClusterPaused sets the Cluster's spec.paused, as clusterctl move does.
func setClusterPaused(t *testing.T, cluster *clusterv1.Cluster, p bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &clusterv1.Cluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cluster), c); err != nil {
			return err
		}
		c.Spec.Paused = ptr.To(p)
		return env.Client.Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
}
