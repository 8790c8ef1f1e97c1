package controllers

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// scopedObject is an infrastructure object a reconciler owns: it carries
// conditions and is patched when the reconcile returns.
type scopedObject interface {
	client.Object
	conditions.Setter
}

// capiOwner is the Cluster API object an infrastructure object belongs to.
type capiOwner interface {
	*clusterv1.Cluster | *clusterv1.Machine | *clusterv1.MachinePool
}

// scope is what every reconcile of an infrastructure object reads once
// before it acts, as Cluster API's and CAPZ's reconcilers open with a
// scope: the object (patched when the reconcile returns, whichever way),
// the Cluster API object that owns it, and its Cluster, with Cluster API's
// pause contract applied. While the object is being deleted, an owner or
// Cluster already gone is nil, and what to delete comes from the object's
// own status.
type scope[T scopedObject, O capiOwner] struct {
	obj      T
	owner    O
	cluster  *clusterv1.Cluster
	deleting bool
	helper   *patch.Helper
	// written: the object was patched during load (its Paused
	// condition), so helper's view of it is stale.
	written bool
}

// openScope reads the object; nil (and no error) when it is gone. The
// caller defers close at once, so that whatever the rest of the reconcile
// sets (a condition saying why a read failed, included) is written.
func openScope[O capiOwner, T scopedObject](ctx context.Context, c client.Client, key client.ObjectKey, obj T) (*scope[T, O], error) {
	if err := c.Get(ctx, key, obj); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	helper, err := patch.NewHelper(obj, c)
	if err != nil {
		return nil, err
	}
	restoreRecords(obj)
	return &scope[T, O]{obj: obj, helper: helper, deleting: !obj.GetDeletionTimestamp().IsZero()}, nil
}

// close writes the object's changes (patchOnReturn), but not after load
// wrote the Paused condition: the helper would send that change again from
// the object as read, which the API server refuses as a conflict (the
// helper then retries with an empty patch), three requests for one change.
// Cluster API's controllers likewise return before they patch when
// EnsurePausedCondition asks to requeue (core/reconcilers/machine/
// machine_controller.go Reconcile, cluster-api v1.14.2). The write's
// own event brings the object back; what this reconcile restored from its
// records is written by that one.
func (s *scope[T, O]) close(ctx context.Context, reterr *error) {
	if s.written {
		return
	}
	patchOnReturn(ctx, s.helper, s.obj, reterr)
}

// ownerReader reads an object's Cluster API owner from its metadata; nil
// (and no error) while Cluster API has not set it.
type ownerReader[O capiOwner] struct {
	what string
	get  func(context.Context, client.Client, metav1.ObjectMeta) (O, error)
	// ownerIsCluster: the owner is the Cluster itself (an AzureCluster's);
	// otherwise the Cluster is read from the cluster-name label.
	ownerIsCluster bool
}

var (
	clusterOwner = ownerReader[*clusterv1.Cluster]{what: "Cluster", get: util.GetOwnerCluster, ownerIsCluster: true}
	machineOwner = ownerReader[*clusterv1.Machine]{what: "Machine", get: util.GetOwnerMachine}
	poolOwner    = ownerReader[*clusterv1.MachinePool]{what: "MachinePool", get: util.GetOwnerMachinePool}
)

// load reads the owner and the Cluster and applies the pause contract.
// stop says the reconcile ends here, returning err: a read failed with
// something other than NotFound (nothing can be decided, deletion
// included: the finalizer stays), Cluster API has not set the owner yet
// (its update brings the object back), or the Cluster or the object is
// paused (clusterctl move pauses the Cluster; the Paused condition says
// so).
func (s *scope[T, O]) load(ctx context.Context, c client.Client, r ownerReader[O]) (stop bool, err error) {
	owner, err := r.get(ctx, c, metaOf(s.obj))
	switch {
	case gone(err) && s.deleting:
		owner = nil
	case err != nil:
		return true, readBlocked(s.obj, s.deleting, "the owning "+r.what, err)
	}
	if owner == nil && !s.deleting {
		log.FromContext(ctx).Info("waiting for Cluster API to set the owning " + r.what)
		return true, nil
	}
	s.owner = owner
	if r.ownerIsCluster {
		s.cluster, _ = any(owner).(*clusterv1.Cluster)
	} else {
		cluster, err := util.GetClusterFromMetadata(ctx, c, metaOf(s.obj))
		switch {
		case (gone(err) || errors.Is(err, util.ErrNoCluster)) && s.deleting:
			cluster = nil
		case err != nil:
			return true, readBlocked(s.obj, s.deleting, "the Cluster", err)
		}
		s.cluster = cluster
	}
	if s.cluster != nil {
		isPaused, requeue, err := paused.EnsurePausedCondition(ctx, c, s.cluster, s.obj)
		s.written = requeue && err == nil
		if err != nil || isPaused || requeue {
			return true, err
		}
	}
	return false, nil
}

// metaOf is an object's metadata, as Cluster API's owner readers take it.
func metaOf(o client.Object) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace(), Labels: o.GetLabels(), OwnerReferences: o.GetOwnerReferences()}
}
