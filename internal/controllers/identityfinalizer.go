package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azureclusteridentities,verbs=update;patch

// identityFinalizer is what an AzureCluster puts on the AzureClusterIdentity
// it acts as, for as long as the cluster has Azure resources to delete: a
// cluster's resources are deleted only as its own identity, never as the
// manager's credential (README, Security model), so an identity deleted
// first (a namespace deleted whole, an operator cleaning up) would leave
// the cluster's machines and network undeletable. CAPZ does the same
// (controllers/helpers.go EnsureClusterIdentity and
// RemoveClusterIdentityFinalizer @69ec3a40), one finalizer per cluster,
// named by a hash of the cluster's namespace and name (a finalizer's name
// part is at most 63 characters).
func identityFinalizer(ac *infrav1.AzureCluster) string {
	sum := sha256.Sum256([]byte(ac.Namespace + "/" + ac.Name))
	return "azurecluster.infrastructure.winkube.dev/" + hex.EncodeToString(sum[:])[:32]
}

func identityKey(ac *infrav1.AzureCluster) (types.NamespacedName, bool) {
	ref := ac.Spec.IdentityRef
	if ref == nil {
		return types.NamespacedName{}, false
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if key.Namespace == "" {
		key.Namespace = ac.Namespace
	}
	return key, true
}

// holdIdentity puts the cluster's finalizer on its identity. It is called
// once Identities.Services accepted the identity for the cluster's
// namespace, so a tenant can hold only an identity it may use.
func holdIdentity(ctx context.Context, c client.Client, ac *infrav1.AzureCluster) error {
	return patchIdentityFinalizer(ctx, c, ac, controllerutil.AddFinalizer)
}

// releaseIdentity takes the cluster's finalizer off its identity, once the
// cluster's Azure resources are gone; an identity already gone is done.
func releaseIdentity(ctx context.Context, c client.Client, ac *infrav1.AzureCluster) error {
	return patchIdentityFinalizer(ctx, c, ac, controllerutil.RemoveFinalizer)
}

func patchIdentityFinalizer(ctx context.Context, c client.Client, ac *infrav1.AzureCluster, change func(client.Object, string) bool) error {
	key, ok := identityKey(ac)
	if !ok {
		return nil
	}
	id := &infrav1.AzureClusterIdentity{}
	if err := c.Get(ctx, key, id); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	orig := id.DeepCopy()
	if !change(id, identityFinalizer(ac)) {
		return nil
	}
	// The optimistic lock keeps other clusters' finalizers, written in
	// between, from being replaced by this list.
	if err := c.Patch(ctx, id, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("the finalizer of AzureCluster %s/%s on AzureClusterIdentity %s: %w", ac.Namespace, ac.Name, key, err)
	}
	return nil
}

// deletionNeedsIdentity is the Ready message of an object whose deletion
// waits for its cluster's identity: what is missing, why winkube does not
// use another credential, and the operator's two ways out.
func deletionNeedsIdentity(obj any, what string, ie *identityError) string {
	finalizer := "winkube's finalizer"
	if o, ok := obj.(client.Object); ok {
		for _, f := range o.GetFinalizers() {
			if strings.HasSuffix(f, ".infrastructure.winkube.dev") {
				finalizer = fmt.Sprintf("the finalizer %s from %s %s/%s", f, reflect.TypeOf(o).Elem().Name(), o.GetNamespace(), o.GetName())
			}
		}
	}
	return fmt.Sprintf("deleting %s waits for the cluster's identity: %s. winkube deletes a cluster's Azure resources only as the identity they were made as, never as the manager's own credential; restore the identity (the AzureClusterIdentity and its Secret) and deletion resumes, or delete these resources in Azure yourself and remove %s", what, ie.msg, finalizer)
}
