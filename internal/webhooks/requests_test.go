package webhooks_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/testenv"
)

// An AzureMachine's OS and runtime must suit its Machine's Kubernetes
// version, which the webhook reads from the Machine that owns it. The
// controllers and Cluster API write a machine's finalizer, labels and
// records a dozen times while it comes up; those updates change neither the
// spec nor the owner, and the webhook reads no Machine for them (it did,
// live, for each). The update that adds the owner is still checked.
func TestMetadataUpdatesReadNoMachine(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "reads")
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Spec: clusterv1.MachineSpec{ClusterName: "c1", Version: "v1.36.3",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("m1-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: "m1"}},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	owner := []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}}
	am := &infrav1.AzureMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}, OwnerReferences: owner},
		Spec:       infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}},
	}
	if err := env.Client.Create(ctx, am); err != nil {
		t.Fatal(err)
	}
	before := testenv.APIRequests(ctx, t, env.Config, "GET", "machines")
	for i, change := range []func(*infrav1.AzureMachine){
		func(o *infrav1.AzureMachine) { o.Finalizers = append(o.Finalizers, infrav1.MachineFinalizer) },
		func(o *infrav1.AzureMachine) { o.Labels["cluster.x-k8s.io/set-name"] = "md-0-abcde" },
		func(o *infrav1.AzureMachine) { o.Annotations = map[string]string{"example.com/note": "x"} },
	} {
		patch := client.MergeFrom(am.DeepCopy())
		change(am)
		if err := env.Client.Patch(ctx, am, patch); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	if n := testenv.APIRequests(ctx, t, env.Config, "GET", "machines") - before; n != 0 {
		t.Errorf("three updates of the AzureMachine's metadata made the API server answer %d GETs of Machines, want none", n)
	}

	// A machine made without its owner, whose runtime its Machine's
	// version does not take: the update that adds the owner is refused.
	bad := &infrav1.AzureMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m2", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3", ContainerRuntime: infrav1.Dockershim,
			OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}},
	}
	if err := env.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(bad.DeepCopy())
	bad.OwnerReferences = owner
	if err := env.Client.Patch(ctx, bad, patch); err == nil || !strings.Contains(err.Error(), "containerRuntime") {
		t.Errorf("adding a v1.36.3 Machine as the owner of a dockershim machine: %v, want it refused for its containerRuntime", err)
	}
}
