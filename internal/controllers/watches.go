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
	"github.com/winkube/winkube/internal/azure/tags"
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

// ownWritesFilter passes the updates of an object that its controller's
// reconcile acts on, and not those that change only what that reconcile
// writes itself: its status (conditions, addresses, state, the record of
// the operations under way, which are polled at the requeue the reconcile
// returns), the annotations named in own, and the spec fields that
// specChanged leaves out. Each such write used to wake the object at once
// to read its resources in Azure again, though nothing had changed but the
// report of the reconcile just run. What passes: a spec change specChanged
// reports, labels, other annotations (a paused annotation; the resources
// it recorded before making them, which the next reconcile makes),
// finalizers, owner references, deletion, and its Paused condition
// changing (Cluster API's paused.EnsurePausedCondition asks its caller to
// come back after writing it).
//
// CAPZ spaces these wakes instead: its AzureCluster, AzureMachine,
// AzureMachinePool and AzureMachinePoolMachine controllers watch every
// update of their objects (controllers/azurecluster_controller.go,
// controllers/azuremachine_controller.go, exp/controllers/
// azuremachinepool_controller.go and azuremachinepoolmachine_controller.go
// SetupWithManager, cluster-api-provider-azure @69ec3a40) through a
// reconciler that skips a request for --debouncing-timer (10 s) after a
// successful reconcile (pkg/coalescing/reconciler.go @2cbcf3b5, main.go
// @1e5b0b0c); a delay the local world, whose VMs come up in seconds, would
// wait out on every object.
//
// A resync (the cache's periodic replay, old and new the same object at
// the same resourceVersion) passes, as it does through CAPZ's unfiltered
// watch: it is the only wake left for an object at rest, whose resources
// may have been deleted or changed in Azure meanwhile.
func ownWritesFilter(specChanged func(o, n client.Object) bool, own ...string) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		if rv := n.GetResourceVersion(); rv != "" && rv == o.GetResourceVersion() {
			return true
		}
		if !sameMetadataActedOn(o, n, own) || specChanged(o, n) {
			return true
		}
		oc, ok1 := o.(conditions.Getter)
		nc, ok2 := n.(conditions.Getter)
		return !ok1 || !ok2 || pausedStatus(oc) != pausedStatus(nc)
	}}
}

// azureMachineChanged: an AzureMachine's reconcile writes its conditions,
// addresses, state and operations, and the providerID once the VM is made
// (a new generation, then every condition's observedGeneration
// rewritten); each woke it to read its VM and NIC in Azure again, 7 to 8
// reconciles while it came up.
var azureMachineChanged = ownWritesFilter(azureMachineSpecChanged, OperationsAnnotation)

// azureMachinePoolChanged: a pool's reconcile writes its conditions,
// replicas, ready and provisioned, computer-name prefix, pinned image,
// infrastructure machine kind and operations in status, the providerID and
// providerIDList in its spec (azuremachinepool_controller.go writeScaleSet,
// reconcileInstanceMachines), and the record of the tags it applied (an
// annotation); each woke it to read the scale set and list its instances
// again. The resources it records before making them (the scale set, a
// role assignment) are annotations that still wake it: the reconcile that
// records one ends, and the next makes it.
var azureMachinePoolChanged = ownWritesFilter(specChangedBeyond(func(o, n *infrav1.AzureMachinePool) (any, any) {
	spec := o.Spec.DeepCopy()
	spec.ProviderID, spec.ProviderIDList = n.Spec.ProviderID, n.Spec.ProviderIDList
	return *spec, n.Spec
}), OperationsAnnotation, tags.LastAppliedAnnotation)

// azureMachinePoolMachineChanged: an instance's reconcile writes its
// conditions, computer name, addresses, provisioning state, whether it
// runs the latest model, provisioned, and the Run Commands and deletion
// under way; its spec is the pool's to write (a spec change wakes it).
var azureMachinePoolMachineChanged = ownWritesFilter(generationChanged, OperationsAnnotation)

// azureClusterChanged: an AzureCluster's reconcile writes its conditions,
// failure domains, provisioned and operations in status, the
// controlPlaneEndpoint in its spec once the API server's IP is made
// (azurecluster_controller.go reconcileEndpoint; the webhook refuses any
// later change), and the record of the tags it applied; each woke it to
// read every network resource in Azure again. The subnets it records
// before adding them to a user's VNet still wake it, as does the identity
// annotation it writes with its finalizer.
var azureClusterChanged = ownWritesFilter(specChangedBeyond(func(o, n *infrav1.AzureCluster) (any, any) {
	spec := o.Spec.DeepCopy()
	if spec.ControlPlaneEndpoint.Host == "" {
		spec.ControlPlaneEndpoint = n.Spec.ControlPlaneEndpoint
	}
	return *spec, n.Spec
}), OperationsAnnotation, tags.LastAppliedAnnotation)

// sameMetadataActedOn: o and n do not differ in the metadata a reconcile
// acts on: labels, annotations but those in own (the records it keeps of
// what it did), finalizers, owner references, deletion.
func sameMetadataActedOn(o, n client.Object, own []string) bool {
	oa, na := maps.Clone(o.GetAnnotations()), maps.Clone(n.GetAnnotations())
	for _, k := range own {
		delete(oa, k)
		delete(na, k)
	}
	return maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(oa, na) && slices.Equal(o.GetFinalizers(), n.GetFinalizers()) &&
		apiequality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) &&
		o.GetDeletionTimestamp().IsZero() == n.GetDeletionTimestamp().IsZero()
}

// azureMachineSpecChanged: a new generation, with more changed than the
// providerID the reconcile sets once the VM is made (the webhook lets
// only that change through on an existing machine, and only to the value
// the VM's ARM ID gives).
var azureMachineSpecChanged = specChangedBeyond(func(o, n *infrav1.AzureMachine) (any, any) {
	spec := o.Spec.DeepCopy()
	spec.ProviderID = n.Spec.ProviderID
	return *spec, n.Spec
})

// specChangedBeyond reports a new generation with more changed than the
// spec fields a reconcile sets itself: own returns o's spec with those
// fields taken from n, and n's spec, to compare. Objects of another type
// than T count as changed.
func specChangedBeyond[T client.Object](own func(o, n T) (any, any)) func(o, n client.Object) bool {
	return func(o, n client.Object) bool {
		if !generationChanged(o, n) {
			return false
		}
		ot, ok1 := o.(T)
		nt, ok2 := n.(T)
		if !ok1 || !ok2 {
			return true
		}
		was, is := own(ot, nt)
		return !apiequality.Semantic.DeepEqual(was, is)
	}
}

func generationChanged(o, n client.Object) bool { return o.GetGeneration() != n.GetGeneration() }

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
