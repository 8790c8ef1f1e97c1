package controllers

import (
	"context"
	"maps"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// infraRefRequest maps a Cluster API object to the winkube object its
// infrastructureRef names, when it names one of kind.
func infraRefRequest(kind string, ref clusterv1.ContractVersionedObjectReference, namespace string) []reconcile.Request {
	if ref.Kind != kind || ref.APIGroup != infrav1.GroupVersion.Group || ref.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: namespace, Name: ref.Name}}}
}

// machineChanged passes the Machine updates an AzureMachine acts on: the
// part of its spec it reads (bootstrap data, version, failure domain),
// labels, annotations and deletion. Cluster API patches a Machine's status
// a dozen times while it comes up, and the AzureMachine reads none of it
// but its node reference; each patch used to wake it to read its VM, NIC
// and identity again. Nor does it read the Machine's providerID, which
// Cluster API copies from the AzureMachine once its VM is made (a spec
// change, so a new generation: core/reconcilers/machine/
// machine_controller_phases.go reconcileInfrastructure, cluster-api
// v1.14.2): that woke every machine once more to read its VM and NIC.
var machineChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return machineSpecChanged(o, n) || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
		!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) || o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero() ||
		nodeRefSet(o) != nodeRefSet(n)
}}

// azureMachineChanged passes the updates of an AzureMachine that its
// reconcile acts on: a spec change (other than the providerID the
// reconcile itself sets), labels, annotations (a paused annotation; the
// resources it recorded before making them, which the next reconcile
// makes), finalizers, owner references (Cluster API setting the Machine),
// deletion, and its Paused condition changing (Cluster API's
// paused.EnsurePausedCondition asks its caller to come back after writing
// it). Its own status writes pass no more: each reconcile wrote its
// conditions, addresses and state and was woken by that write to read its
// VM and NIC in Azure again, and by the operations it records (an
// operation under way is polled at the requeue it returns) and the
// providerID it sets once the VM is made (a new generation, then every
// condition's observedGeneration rewritten): an AzureMachine was
// reconciled 7 to 8 times while it came up. CAPZ spaces these wakes
// instead: its AzureMachine controller watches every update
// (controllers/azuremachine_controller.go SetupWithManager,
// cluster-api-provider-azure @3827a27b) through a reconciler that skips a
// request for --debouncing-timer (10 s) after a successful reconcile
// (pkg/coalescing/reconciler.go @2cbcf3b5, main.go @1e5b0b0c); a delay the local
// world, whose VMs come up in seconds, would wait out on every machine.
//
// A resync (the cache's periodic replay, old and new the same object at
// the same resourceVersion) passes, as it does through CAPZ's unfiltered
// watch: it is the only wake left for a machine at rest, whose VM may
// have been deleted or changed in Azure meanwhile.
var azureMachineChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	if rv := n.GetResourceVersion(); rv != "" && rv == o.GetResourceVersion() {
		return true
	}
	if !sameMetadataActedOn(o, n) || azureMachineSpecChanged(o, n) {
		return true
	}
	oc, ok1 := o.(conditions.Getter)
	nc, ok2 := n.(conditions.Getter)
	return !ok1 || !ok2 || pausedStatus(oc) != pausedStatus(nc)
}}

// sameMetadataActedOn: o and n do not differ in the metadata a reconcile
// acts on: labels, annotations but the record of operations under way,
// finalizers, owner references, deletion.
func sameMetadataActedOn(o, n client.Object) bool {
	oa, na := maps.Clone(o.GetAnnotations()), maps.Clone(n.GetAnnotations())
	delete(oa, OperationsAnnotation)
	delete(na, OperationsAnnotation)
	return maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(oa, na) && slices.Equal(o.GetFinalizers(), n.GetFinalizers()) &&
		apiequality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) &&
		o.GetDeletionTimestamp().IsZero() == n.GetDeletionTimestamp().IsZero()
}

// azureMachineSpecChanged: a new generation, with more changed than the
// providerID the reconcile sets once the VM is made (the webhook lets
// only that change through on an existing machine, and only to the value
// the VM's ARM ID gives).
func azureMachineSpecChanged(o, n client.Object) bool {
	if o.GetGeneration() == n.GetGeneration() {
		return false
	}
	om, ok1 := o.(*infrav1.AzureMachine)
	nm, ok2 := n.(*infrav1.AzureMachine)
	if !ok1 || !ok2 {
		return true
	}
	spec := om.Spec.DeepCopy()
	spec.ProviderID = nm.Spec.ProviderID
	return !apiequality.Semantic.DeepEqual(*spec, nm.Spec)
}

func pausedStatus(o conditions.Getter) metav1.ConditionStatus {
	if c := conditions.Get(o, clusterv1.PausedCondition); c != nil {
		return c.Status
	}
	return ""
}

// machineSpecChanged: the part of a Machine's spec that the AzureMachine's
// reconcile reads changed.
func machineSpecChanged(o, n client.Object) bool {
	om, ok1 := o.(*clusterv1.Machine)
	nm, ok2 := n.(*clusterv1.Machine)
	if !ok1 || !ok2 {
		return o.GetGeneration() != n.GetGeneration()
	}
	return !ptr.Equal(om.Spec.Bootstrap.DataSecretName, nm.Spec.Bootstrap.DataSecretName) || om.Spec.Version != nm.Spec.Version ||
		om.Spec.FailureDomain != nm.Spec.FailureDomain || om.Spec.InfrastructureRef != nm.Spec.InfrastructureRef
}

// poolMachineChanged passes the changes of a pool's instance objects that
// its pool acts on: one going (deleted, or being deleted), Cluster API's
// delete-machine annotation, and its Ready condition (its node became Ready
// or stopped being Ready) or bootstrap failing. Each instance object's
// status changes several times while it comes up, and each woke the pool
// to read the scale set and list every instance. CAPZ filters alike
// (exp/controllers/helpers.go MachinePoolMachineHasStateOrVersionChange,
// CAPZ 69ec3a40).
var poolMachineChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*infrav1.AzureMachinePoolMachine)
		n, ok2 := e.ObjectNew.(*infrav1.AzureMachinePoolMachine)
		if !ok1 || !ok2 {
			return true
		}
		_, markedOld := o.Annotations[clusterv1.DeleteMachineAnnotation]
		_, markedNew := n.Annotations[clusterv1.DeleteMachineAnnotation]
		return o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() || markedOld != markedNew ||
			conditions.IsTrue(o, ReadyCondition) != conditions.IsTrue(n, ReadyCondition) ||
			conditions.GetReason(o, BootstrapSucceededCondition) != conditions.GetReason(n, BootstrapSucceededCondition)
	},
}

// nodeReadyChanged passes the Machine updates whose node became Ready or
// stopped being Ready (Cluster API mirrors the node's Ready condition as
// the Machine's NodeReady): a pool's instance is available by it.
var nodeReadyChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return nodeReady(e.ObjectOld) != nodeReady(e.ObjectNew)
}}

func nodeReady(o client.Object) bool {
	m, ok := o.(*clusterv1.Machine)
	return ok && conditions.IsTrue(m, clusterv1.MachineNodeReadyCondition)
}

// nodeRefSet: the Machine's node has registered, which ends the watch on
// its bootstrap (bootstrap.go).
func nodeRefSet(o client.Object) bool {
	m, ok := o.(*clusterv1.Machine)
	return ok && m.Status.NodeRef.IsDefined()
}

// machineToAzureMachine wakes an AzureMachine when its Machine changes (its
// bootstrap data became ready).
func machineToAzureMachine(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return nil
	}
	return infraRefRequest("AzureMachine", m.Spec.InfrastructureRef, m.Namespace)
}

// machineToPoolMachine wakes a scale-set instance's AzureMachinePoolMachine
// when its Machine changes (its node registered).
func machineToPoolMachine(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return nil
	}
	return infraRefRequest("AzureMachinePoolMachine", m.Spec.InfrastructureRef, m.Namespace)
}

// machinePoolToAzureMachinePool wakes an AzureMachinePool when its
// MachinePool changes (replicas, version, bootstrap data).
func machinePoolToAzureMachinePool(_ context.Context, o client.Object) []reconcile.Request {
	mp, ok := o.(*clusterv1.MachinePool)
	if !ok {
		return nil
	}
	return infraRefRequest("AzureMachinePool", mp.Spec.Template.Spec.InfrastructureRef, mp.Namespace)
}

// clusterToObjects wakes every object of list's kind in a Cluster when the
// Cluster changes (its infrastructure became provisioned).
func clusterToObjects(c client.Client, newList func() client.ObjectList) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
			return nil
		}
		var out []reconcile.Request
		switch l := list.(type) {
		case *infrav1.AzureMachineList:
			for _, it := range l.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&it)})
			}
		case *infrav1.AzureMachinePoolList:
			for _, it := range l.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&it)})
			}
		}
		return out
	}
}
