package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
)

// Two clusters called prod in the same namespace of two management
// clusters share a subscription (finding 7 of issue 54). The first one's
// objects are taken out of this management cluster with its resources left
// in Azure (as if it lived in another); a second prod in the same
// namespace and group is refused, and deleting it leaves the first's group
// and network intact.
func TestSameNamedClusterElsewhereIsKeptApart(t *testing.T) {
	parallel(t)
	_, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	defer stop()
	ctx := context.Background()
	az := newAzure(t, cfg)
	first := newCluster(t, "prod")
	first.waitClusterProvisioned(time.Minute)
	rg := first.ac.Spec.ResourceGroup
	before := az.inventory(rg)

	// The first cluster lives elsewhere from now on: paused, then its
	// objects removed without deleting anything in Azure.
	patch := client.MergeFrom(first.cluster.DeepCopy())
	first.cluster.Spec.Paused = ptr.To(true)
	if err := env.Client.Patch(ctx, first.cluster, patch); err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		ac := &infrav1.AzureCluster{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(first.ac), ac); err != nil {
			return err.Error()
		}
		for _, c := range ac.Status.Conditions {
			if c.Type == clusterv1.PausedCondition && c.Status == metav1.ConditionTrue {
				return ""
			}
		}
		return "the first AzureCluster is not paused yet"
	})
	ac := &infrav1.AzureCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(first.ac), ac); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(ac.DeepCopy())
	controllerutil.RemoveFinalizer(ac, infrav1.ClusterFinalizer)
	if err := env.Client.Patch(ctx, ac, patch); err != nil {
		t.Fatal(err)
	}
	first.deleteAndWait(time.Minute, ac, first.cluster)

	// The second prod, in a namespace of the same name, with the same group.
	second := &fixture{t: t, ctx: ctx, ns: first.ns, cluster: capiCluster("prod", first.ns)}
	if err := env.Client.Create(ctx, second.cluster); err != nil {
		t.Fatal(err)
	}
	second.ac = &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: first.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "prod"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "prod", UID: second.cluster.UID}}},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: subscription, Location: "westeurope", ResourceGroup: rg},
	}
	if err := env.Client.Create(ctx, second.ac); err != nil {
		t.Fatal(err)
	}
	env.Until(t, time.Minute, func(r client.Reader) string {
		if err := r.Get(ctx, client.ObjectKeyFromObject(second.ac), second.ac); err != nil {
			return err.Error()
		}
		for _, c := range second.ac.Status.Conditions {
			if c.Type == "Ready" && c.Reason == "ResourceNotOwned" {
				return ""
			}
		}
		return fmt.Sprintf("the second prod is not refused: %+v", second.ac.Status.Conditions)
	})
	if ptr.Deref(second.ac.Status.Initialization.Provisioned, false) {
		t.Fatal("the second prod reports the first's network as its own")
	}

	second.deleteAndWait(time.Minute, second.ac)
	if _, err := az.groups.Get(ctx, rg, nil); err != nil {
		t.Fatalf("deleting the second prod deleted the first's group: %v", err)
	}
	after := az.inventory(rg)
	for typ, names := range before {
		if len(after[typ]) != len(names) {
			t.Errorf("deleting the second prod deleted the first's %s: before %v, after %v", typ, names, after[typ])
		}
	}
}
