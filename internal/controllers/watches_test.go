package controllers_test

import (
	"testing"

	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/event"

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
