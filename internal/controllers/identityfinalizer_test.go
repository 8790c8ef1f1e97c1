package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// TestClusterHoldsItsIdentityUntilItsResourcesAreGone: an AzureClusterIdentity
// deleted while a cluster still has Azure resources (a namespace deleted
// whole) stays, held by the cluster's finalizer, so the machines and the
// cluster are deleted as that identity, and goes once they are.
func TestClusterHoldsItsIdentityUntilItsResourcesAreGone(t *testing.T) {
	parallel(t)
	w := newEntraWorld(t)
	startLoggedControllers(t, w.cfg, &syncBuffer{})
	const sub = "00000000-0000-0000-0000-0000000000a7"
	sp, secret := w.principal(t, "keeper", sub)
	f := newCluster(t, "keeper", withIdentity(sub, "keeper", ""))
	createIdentity(t, f.ns, "keeper", sp, secret, &infrav1.AllowedNamespaces{NamespaceList: []string{f.ns}})
	f.waitClusterProvisioned(2 * time.Minute)
	am := f.newMachine("keeper-md-abcde-12345", false, false, "")
	f.waitMachinesProvisioned(2*time.Minute, am.Name)

	key := client.ObjectKey{Namespace: f.ns, Name: "keeper"}
	// The cluster is provisioned, so it holds its identity (holdIdentity
	// comes before anything it makes).
	if err := env.Client.Delete(f.ctx, &infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	// The machine and the cluster are deleted as the identity, which
	// waits for them.
	if err := env.Client.Delete(f.ctx, am); err != nil {
		t.Fatal(err)
	}
	env.Until(t, 2*time.Minute, func(r client.Reader) string {
		err := r.Get(f.ctx, client.ObjectKeyFromObject(am), am)
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("the machine is not deleted once its identity was: %v %+v", err, am.Status.Conditions)
	})
	if err := env.Client.Get(f.ctx, key, &infrav1.AzureClusterIdentity{}); err != nil {
		t.Fatalf("the identity went before its cluster: %v", err)
	}
	// An identity that goes anyway (its finalizer taken off by hand) stops
	// the cluster's deletion with what to do, and restoring it resumes it.
	id := &infrav1.AzureClusterIdentity{}
	if err := env.Client.Get(f.ctx, key, id); err != nil {
		t.Fatal(err)
	}
	spec := id.Spec
	patch := client.MergeFrom(id.DeepCopy())
	id.Finalizers = nil
	if err := env.Client.Patch(f.ctx, id, patch); err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, key, &infrav1.AzureClusterIdentity{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the identity is still there: %v", err)
		}
		return ""
	})
	if err := env.Client.Delete(f.ctx, f.ac); err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(f.ac), f.ac); err != nil {
			return err.Error()
		}
		c := conditions.Get(f.ac, "Ready")
		if c == nil || !strings.Contains(c.Message, "never as the manager's own credential") || !strings.Contains(c.Message, "restore the identity") ||
			!strings.Contains(c.Message, "remove the finalizer azurecluster.infrastructure.winkube.dev from AzureCluster "+f.ns+"/"+f.ac.Name) {
			return fmt.Sprintf("the blocked deletion does not say what to do: %+v", c)
		}
		return ""
	})
	if err := env.Client.Create(f.ctx, &infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	f.deleteAndWait(2*time.Minute, f.ac)
}
