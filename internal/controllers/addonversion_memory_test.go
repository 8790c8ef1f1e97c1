package controllers_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/scheme"
)

// TestAddonVersionForgetsDeletedClusters: the controller's memory of
// settled Clusters holds the Clusters that exist; a deleted Cluster's
// entry goes with it, so that a manager outliving many Clusters does not
// keep one entry for each.
func TestAddonVersionForgetsDeletedClusters(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	r := &controllers.AddonVersionReconciler{Client: c, Reader: c}
	key := types.NamespacedName{Namespace: "tenant", Name: "gone"}
	r.RememberFollowed(key)
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if n := r.FollowedClusters(); n != 0 {
		t.Errorf("the controller remembers %d Clusters after its only one was deleted, want 0", n)
	}
}
