package controllers_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/controllers"
)

// TestMachineUpdatesThatWakeAnAzureMachine: of the changes Cluster API
// makes to a Machine while it comes up, those the AzureMachine's reconcile
// reads wake it (its bootstrap data, version, failure domain, node
// reference), and the providerID Cluster API copies from the AzureMachine
// once its VM is made does not, though it is a spec change (a new
// generation): it woke every machine once more to read its VM and NIC.
func TestMachineUpdatesThatWakeAnAzureMachine(t *testing.T) {
	base := func() *clusterv1.Machine {
		m := &clusterv1.Machine{Spec: clusterv1.MachineSpec{ClusterName: "c", Version: "v1.36.3",
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.winkube.dev", Kind: "AzureMachine", Name: "m"}}}
		m.Name, m.Namespace, m.Generation = "m", "ns", 1
		return m
	}
	for _, tc := range []struct {
		name   string
		change func(*clusterv1.Machine)
		wakes  bool
	}{
		{"providerID copied from the AzureMachine", func(m *clusterv1.Machine) {
			m.Spec.ProviderID = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m"
		}, false},
		{"status patched", func(m *clusterv1.Machine) { m.Status.Phase = "Provisioned" }, false},
		{"bootstrap data ready", func(m *clusterv1.Machine) { m.Spec.Bootstrap.DataSecretName = ptr.To("m-bootstrap") }, true},
		{"version changed", func(m *clusterv1.Machine) { m.Spec.Version = "v1.37.0" }, true},
		{"failure domain set", func(m *clusterv1.Machine) { m.Spec.FailureDomain = "2" }, true},
		{"node registered", func(m *clusterv1.Machine) { m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "m"} }, true},
		{"labelled", func(m *clusterv1.Machine) { m.Labels = map[string]string{"k": "v"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if cur.Spec.ProviderID != "" || cur.Spec.Bootstrap.DataSecretName != nil || cur.Spec.Version != old.Spec.Version || cur.Spec.FailureDomain != "" {
				// A spec change, as the API server numbers it.
				cur.Generation++
			}
			if got := controllers.MachineChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wakes {
				t.Errorf("the update wakes the AzureMachine: %v, want %v", got, tc.wakes)
			}
		})
	}
}

// TestAzureMachineUpdatesThatWakeIt: of an AzureMachine's own writes while
// it comes up, those its next reconcile acts on wake it (the finalizer, the
// resources it recorded before making them, its Paused condition, as
// Cluster API's pause contract asks), and those that only report do not:
// its conditions, addresses and state, the operations it records (polled at
// the requeue the reconcile returns) and the providerID it sets once the VM
// is made. Each of those woke it to read its VM and NIC in Azure again.
// What others change still wakes it: a paused annotation, its deletion, a
// spec change, Cluster API setting its owner.
func TestAzureMachineUpdatesThatWakeIt(t *testing.T) {
	base := func() *infrav1.AzureMachine {
		am := &infrav1.AzureMachine{Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3"}}}
		am.Name, am.Namespace, am.Generation = "m", "ns", 1
		am.Labels = map[string]string{clusterv1.ClusterNameLabel: "c"}
		am.Finalizers = []string{infrav1.MachineFinalizer}
		am.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "m", UID: "u"}}
		am.Annotations = map[string]string{controllers.CreatedResourcesAnnotation: `["/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m"]`}
		conditions.Set(am, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
		conditions.Set(am, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionFalse, Reason: controllers.ProvisioningReason, Message: "creating the VM"})
		return am
	}
	const providerID = "azure:///subscriptions/s/resourcegroups/rg/providers/Microsoft.Compute/virtualMachines/m"
	for _, tc := range []struct {
		name   string
		change func(*infrav1.AzureMachine)
		wakes  bool
	}{
		{"Ready condition and addresses written", func(am *infrav1.AzureMachine) {
			conditions.Set(am, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionTrue, Reason: controllers.ProvisionedReason})
			am.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.1.0.4"}}
			am.Status.Initialization.Provisioned = ptr.To(true)
		}, false},
		{"operation under way recorded", func(am *infrav1.AzureMachine) {
			am.Annotations[controllers.OperationsAnnotation] = `[{"name":"m","serviceName":"virtualmachines","type":"PUT","data":"tok"}]`
			am.Status.LongRunningOperationStates = infrav1.Futures{{Name: "m", ServiceName: "virtualmachines", Type: "PUT", Data: "tok"}}
		}, false},
		{"providerID set once the VM is made", func(am *infrav1.AzureMachine) { am.Spec.ProviderID = providerID; am.Generation++ }, false},
		{"observedGeneration rewritten", func(am *infrav1.AzureMachine) {
			for i := range am.Status.Conditions {
				am.Status.Conditions[i].ObservedGeneration = 2
			}
		}, false},
		{"resource recorded before it is made", func(am *infrav1.AzureMachine) {
			am.Annotations[controllers.CreatedResourcesAnnotation] = `["/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m","/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/m-nic"]`
		}, true},
		{"finalizer removed", func(am *infrav1.AzureMachine) { am.Finalizers = nil }, true},
		{"Paused condition written", func(am *infrav1.AzureMachine) {
			conditions.Set(am, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionTrue, Reason: clusterv1.PausedReason})
		}, true},
		{"paused annotation", func(am *infrav1.AzureMachine) { am.Annotations[clusterv1.PausedAnnotation] = "" }, true},
		{"deleted", func(am *infrav1.AzureMachine) { now := metav1.Now(); am.DeletionTimestamp = &now }, true},
		{"owner set", func(am *infrav1.AzureMachine) { am.OwnerReferences[0].UID = "other" }, true},
		{"labelled", func(am *infrav1.AzureMachine) { am.Labels["k"] = "v" }, true},
		{"spec changed", func(am *infrav1.AzureMachine) { am.Spec.AdditionalTags = map[string]string{"k": "v"}; am.Generation++ }, true},
		{"spec changed with the providerID", func(am *infrav1.AzureMachine) {
			am.Spec.ProviderID, am.Spec.VMSize = providerID, "Standard_D4s_v3"
			am.Generation++
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if got := controllers.AzureMachineChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wakes {
				t.Errorf("the update wakes the AzureMachine: %v, want %v", got, tc.wakes)
			}
		})
	}
}

// TestAzureMachineResyncWakesIt: the cache's periodic resync replays each
// AzureMachine as an update of itself (the same resourceVersion); it
// passes, as through CAPZ's unfiltered watch, or a machine at rest would
// never be looked at again (a VM deleted in Azure never noticed), while
// its own status write (a new resourceVersion) still does not wake it.
func TestAzureMachineResyncWakesIt(t *testing.T) {
	am := &infrav1.AzureMachine{}
	am.Name, am.Namespace, am.Generation, am.ResourceVersion = "m", "ns", 1, "7"
	am.Finalizers = []string{infrav1.MachineFinalizer}
	conditions.Set(am, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
	if !controllers.AzureMachineChanged.Update(event.UpdateEvent{ObjectOld: am, ObjectNew: am.DeepCopy()}) {
		t.Error("a resync of the AzureMachine does not wake it")
	}
	written := am.DeepCopy()
	written.ResourceVersion = "8"
	written.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.1.0.4"}}
	if controllers.AzureMachineChanged.Update(event.UpdateEvent{ObjectOld: am, ObjectNew: written}) {
		t.Error("its own status write wakes the AzureMachine")
	}
}
