package webhooks_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Cluster API's topology controller dry-runs template changes with server-side
// apply; the contract requires immutability checks to let those through, and
// only those.
func TestTemplateImmutabilityAllowsTopologyDryRunOnly(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "dry-run")
	tpl := &infrav1.AzureMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "t1", Namespace: ns},
		Spec: infrav1.AzureMachineTemplateSpec{Template: infrav1.AzureMachineTemplateResource{
			Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3"}},
		}},
	}
	if err := env.Client.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	changed := tpl.DeepCopy()
	changed.Spec.Template.Spec.VMSize = "Standard_D8s_v3"

	err := env.Client.Update(ctx, changed.DeepCopy(), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("a plain dry-run change was not refused as immutable: %v", err)
	}
	topo := changed.DeepCopy()
	topo.Annotations = map[string]string{"topology.cluster.x-k8s.io/dry-run": ""}
	if err := env.Client.Update(ctx, topo, client.DryRunAll); err != nil {
		t.Fatalf("the topology controller's dry-run was refused: %v", err)
	}
	// The dry run changed nothing.
	got := &infrav1.AzureMachineTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tpl), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Template.Spec.VMSize != "Standard_D2s_v3" {
		t.Fatalf("dry run persisted vmSize %s", got.Spec.Template.Spec.VMSize)
	}
	if err := env.Client.Update(ctx, topo); err == nil {
		t.Fatal("a real (not dry-run) change with the annotation was accepted")
	}
}
