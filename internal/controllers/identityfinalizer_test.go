package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/poll"
)

// TestClusterHoldsItsIdentityUntilItsResourcesAreGone: an AzureClusterIdentity
// deleted while a cluster still has Azure resources (a namespace deleted
// whole) stays, held by the cluster's finalizer, so the machines and the
// cluster are deleted as that identity, and goes once they are.
func TestClusterHoldsItsIdentityUntilItsResourcesAreGone(t *testing.T) {
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
	poll.Until(t, time.Minute, func() string {
		id := &infrav1.AzureClusterIdentity{}
		if err := env.Client.Get(f.ctx, key, id); err != nil {
			return err.Error()
		}
		for _, fin := range id.Finalizers {
			if strings.HasPrefix(fin, "azurecluster.infrastructure.winkube.dev/") {
				return ""
			}
		}
		return fmt.Sprintf("the identity carries no finalizer of its cluster: %v", id.Finalizers)
	})
	if err := env.Client.Delete(f.ctx, &infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	// The machine and the cluster are deleted as the identity, which
	// waits for them.
	f.deleteAndWait(2*time.Minute, am)
	if err := env.Client.Get(f.ctx, key, &infrav1.AzureClusterIdentity{}); err != nil {
		t.Fatalf("the identity went before its cluster: %v", err)
	}
	f.deleteAndWait(2*time.Minute, f.ac)
	poll.Until(t, time.Minute, func() string {
		if err := env.Client.Get(f.ctx, key, &infrav1.AzureClusterIdentity{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the identity outlived its cluster: %v", err)
		}
		return ""
	})
}
