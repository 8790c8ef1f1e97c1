package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/poll"
)

// playMachinePool plays Cluster API's part for a pool's instances, once:
// each AzureMachinePoolMachine gets a Machine as its controller (Cluster
// API's MachinePool controller makes one per instance), whose node is
// registered and Ready when joined says so of the instance (Cluster API's
// Machine controller mirrors the node's Ready condition as NodeReady); the
// AzureMachinePoolMachine of a deleted Machine goes, as the garbage
// collector, which envtest does not run, would have it.
func (f *fixture) playMachinePool(pool string, joined func(instanceID string) bool) {
	f.t.Helper()
	for _, pm := range f.poolMachines(pool) {
		if !pm.DeletionTimestamp.IsZero() {
			continue
		}
		ref := metav1.GetControllerOf(&pm)
		if ref == nil {
			m := &clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: pm.Name, Namespace: f.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}},
				Spec: clusterv1.MachineSpec{ClusterName: f.cluster.Name, Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(pool + "-bootstrap")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachinePoolMachine", Name: pm.Name}},
			}
			if err := env.Client.Create(f.ctx, m); err != nil && !apierrors.IsAlreadyExists(err) {
				f.t.Fatal(err)
			}
			if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(m), m); err != nil {
				f.t.Fatal(err)
			}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(&pm), &pm); err != nil {
					return err
				}
				pm.OwnerReferences = append(pm.OwnerReferences, metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine",
					Name: m.Name, UID: m.UID, Controller: ptr.To(true)})
				return env.Client.Update(f.ctx, &pm)
			})
			if err != nil && !apierrors.IsNotFound(err) {
				f.t.Fatal(err)
			}
			continue
		}
		m := &clusterv1.Machine{}
		switch err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: ref.Name}, m); {
		case apierrors.IsNotFound(err):
			if err := env.Client.Delete(f.ctx, &pm); err != nil && !apierrors.IsNotFound(err) {
				f.t.Fatal(err)
			}
			continue
		case err != nil:
			f.t.Fatal(err)
		}
		if joined(pm.Spec.InstanceID) && !conditions.IsTrue(m, clusterv1.MachineNodeReadyCondition) {
			m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "node-" + pm.Name}
			conditions.Set(m, metav1.Condition{Type: clusterv1.MachineNodeReadyCondition, Status: metav1.ConditionTrue, Reason: clusterv1.MachineNodeReadyReason})
			if err := env.Client.Status().Update(f.ctx, m); err != nil && !apierrors.IsConflict(err) {
				f.t.Fatal(err)
			}
		}
	}
}

// TestPoolRolloutWaitsForReadyNodes is finding 3 of issue 54: with
// maxSurge 1 and maxUnavailable 0, a rollout deletes no old instance until
// a new instance's node is Ready. Azure provisioning the new instance is
// not enough: when its bootstrap fails, the rollout stops, the old nodes
// stay, and the pool's condition says why; once the node joins, the rollout
// goes on.
func TestPoolRolloutWaitsForReadyNodes(t *testing.T) {
	stop := startControllersWith(t, armCfg, func(o *controllers.Options) { o.PoolBootstrapTimeout = time.Second })
	defer stop()
	az := newAzure(t, armCfg)
	f := newCluster(t, "rollout")
	f.waitClusterProvisioned(time.Minute)
	_, amp := f.newPool("rollout-pool-abcde", 2, true)
	f.waitPool(amp, 2)
	joined := map[string]bool{"0": true, "1": true}
	poll.Until(t, time.Minute, func() string {
		f.playMachinePool(amp.Name, func(id string) bool { return joined[id] })
		for _, pm := range f.poolMachines(amp.Name) {
			if !conditions.IsTrue(&pm, controllers.ReadyCondition) {
				return fmt.Sprintf("%s: Ready %+v, want True once its node is Ready", pm.Name, conditions.Get(&pm, controllers.ReadyCondition))
			}
		}
		return ""
	})

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(amp), amp); err != nil {
			return err
		}
		amp.Spec.Template.VMSize = "Standard_D8s_v3"
		return env.Client.Update(f.ctx, amp)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The new instance is provisioned and never becomes a node.
	poll.Until(t, 2*time.Minute, func() string {
		f.playMachinePool(amp.Name, func(id string) bool { return joined[id] })
		got := instanceIDs(az.instances(f.ns, amp.Name))
		for _, pm := range f.poolMachines(amp.Name) {
			if joined[pm.Spec.InstanceID] && !pm.DeletionTimestamp.IsZero() {
				t.Fatalf("old instance %s is being deleted while the new instances (%s) have no Ready node", pm.Spec.InstanceID, got)
			}
		}
		if !strings.HasPrefix(got, "0,1") {
			t.Fatalf("instances %s: an old instance was deleted while the new one has no Ready node", got)
		}
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(amp), amp); err != nil {
			return err.Error()
		}
		if c := conditions.Get(amp, controllers.ReadyCondition); c == nil || c.Reason != controllers.BootstrapFailedReason {
			return fmt.Sprintf("instances %s; pool Ready %+v, want BootstrapFailed naming the new instance", got, c)
		}
		return ""
	})
	c := conditions.Get(amp, controllers.ReadyCondition)
	if got := instanceIDs(az.instances(f.ns, amp.Name)); got != "0,1,2" {
		t.Fatalf("instances %s, want 0,1,2: the old two kept, one new", got)
	}
	if !strings.Contains(c.Message, "new instance 2") || !strings.Contains(c.Message, "(0,1) are kept") {
		t.Errorf("the pool's condition says %q; want the failed instance and the old ones kept", c.Message)
	}
	t.Logf("pool condition: %s", c.Message)

	// Every node joins now: the rollout goes on and ends with two new
	// instances.
	poll.Until(t, 3*time.Minute, func() string {
		f.playMachinePool(amp.Name, func(string) bool { return true })
		insts := az.instances(f.ns, amp.Name)
		for _, in := range insts {
			if in.id == "0" || in.id == "1" {
				return fmt.Sprintf("old instance %s is still there: %s", in.id, instanceIDs(insts))
			}
		}
		if len(insts) != 2 {
			return fmt.Sprintf("%d instances", len(insts))
		}
		return ""
	})
	f.waitPool(amp, 2)
}
