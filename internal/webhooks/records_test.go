package webhooks_test

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// The controllers' records (which Azure resources an object deletes with
// itself, which operations it resumes) are accepted from whoever creates
// the object, as clusterctl move does, and after that change only by the
// manager's hand: a tenant with every right on the object in its namespace
// is refused, the manager (here the user the webhook server runs as) is not.
func TestOnlyTheManagerChangesRecords(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "records")
	const user = "tenant-records"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"azuremachines"}, Verbs: []string{"*"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	tenant, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	forged := `["/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/other/providers/Microsoft.Compute/virtualMachines/theirs"]`
	m := &infrav1.AzureMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "c1"},
			Annotations: map[string]string{infrav1.CreatedResourcesAnnotation: forged}},
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}},
	}
	if err := tenant.Create(ctx, m); err != nil {
		t.Fatalf("records on create (what clusterctl move writes) were refused: %v", err)
	}
	for key, value := range map[string]string{
		infrav1.CreatedResourcesAnnotation: `[]`,
		infrav1.OperationsAnnotation:       `[{"type":"DELETE","serviceName":"virtualmachines","name":"theirs","data":"{}"}]`,
	} {
		patch := client.MergeFrom(m.DeepCopy())
		m.Annotations[key] = value
		err := tenant.Patch(ctx, m, patch)
		if err == nil || !strings.Contains(err.Error(), "only winkube's manager changes them") || !strings.Contains(err.Error(), key) {
			t.Fatalf("the tenant changed %s: %v", key, err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			t.Fatal(err)
		}
	}
	if m.Annotations[infrav1.CreatedResourcesAnnotation] != forged || m.Annotations[infrav1.OperationsAnnotation] != "" {
		t.Fatalf("the records changed: %v", m.Annotations)
	}
	// Other annotations are the tenant's to change.
	patch := client.MergeFrom(m.DeepCopy())
	m.Annotations["team"] = "a"
	if err := tenant.Patch(ctx, m, patch); err != nil {
		t.Fatalf("the tenant may not change another annotation: %v", err)
	}
	// Marking the object for deletion with delete-for-move does not let a
	// tenant change its records in the same request ...
	patch = client.MergeFrom(m.DeepCopy())
	m.Annotations[clusterctlv1.DeleteForMoveAnnotation] = ""
	m.Annotations[infrav1.CreatedResourcesAnnotation] = `[]`
	if err := tenant.Patch(ctx, m, patch); err == nil || !strings.Contains(err.Error(), "only winkube's manager changes them") {
		t.Fatalf("the tenant changed the records beside delete-for-move: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	// ... but clusterctl move's own patch, which replaces the annotations
	// with delete-for-move alone on the source copy it is about to delete
	// (mover.go, cluster-api v1.14.2), is accepted from whoever moves.
	jsonPatch := client.RawPatch(types.JSONPatchType, []byte(`[{"op": "add", "path":"/metadata/annotations", "value":{"`+clusterctlv1.DeleteForMoveAnnotation+`":""}}]`))
	moved := m.DeepCopy()
	if err := tenant.Patch(ctx, moved, jsonPatch); err != nil {
		t.Fatalf("clusterctl move's delete-for-move patch was refused: %v", err)
	}
	if _, ok := moved.Annotations[infrav1.CreatedResourcesAnnotation]; ok {
		t.Fatalf("the delete-for-move patch kept the records: %v", moved.Annotations)
	}
	// The manager is the webhook server's own user.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(m.DeepCopy())
	m.Annotations[infrav1.CreatedResourcesAnnotation] = forged
	if err := env.Client.Patch(ctx, m, patch); err != nil {
		t.Fatalf("the manager may not change the records: %v", err)
	}
}
