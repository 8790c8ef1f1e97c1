package controllers_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/controllers"
)

// TestMachineUpdatesThatWakeAnAzureMachine: of the changes Cluster API
// makes to a Machine while it comes up, those the AzureMachine's reconcile
// reads wake it (its bootstrap data, version, failure domain, node
// reference), and the providerID Cluster API copies from the AzureMachine
// once its VM is made does not, though it is a spec change (a new
// generation): it woke every machine once more to read its VM and NIC.
func TestMachineUpdatesThatWakeAnAzureMachine(t *testing.T) {
	base := func() *clusterv1.Machine {
		m := &clusterv1.Machine{Spec: clusterv1.MachineSpec{ClusterName: "c", Version: "v1.36.3",
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.winkube.dev", Kind: "AzureMachine", Name: "m"}}}
		m.Name, m.Namespace, m.Generation = "m", "ns", 1
		return m
	}
	for _, tc := range []struct {
		name   string
		change func(*clusterv1.Machine)
		wakes  bool
	}{
		{"providerID copied from the AzureMachine", func(m *clusterv1.Machine) {
			m.Spec.ProviderID = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m"
		}, false},
		{"status patched", func(m *clusterv1.Machine) { m.Status.Phase = "Provisioned" }, false},
		{"bootstrap data ready", func(m *clusterv1.Machine) { m.Spec.Bootstrap.DataSecretName = ptr.To("m-bootstrap") }, true},
		{"version changed", func(m *clusterv1.Machine) { m.Spec.Version = "v1.37.0" }, true},
		{"failure domain set", func(m *clusterv1.Machine) { m.Spec.FailureDomain = "2" }, true},
		{"node registered", func(m *clusterv1.Machine) { m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "m"} }, true},
		{"labelled", func(m *clusterv1.Machine) { m.Labels = map[string]string{"k": "v"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if cur.Spec.ProviderID != "" || cur.Spec.Bootstrap.DataSecretName != nil || cur.Spec.Version != old.Spec.Version || cur.Spec.FailureDomain != "" {
				// A spec change, as the API server numbers it.
				cur.Generation++
			}
			if got := controllers.MachineChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wakes {
				t.Errorf("the update wakes the AzureMachine: %v, want %v", got, tc.wakes)
			}
		})
	}
}

// TestAzureMachineUpdatesThatWakeIt: of an AzureMachine's own writes while
// it comes up, those its next reconcile acts on wake it (the finalizer, the
// resources it recorded before making them, its Paused condition, as
// Cluster API's pause contract asks), and those that only report do not:
// its conditions, addresses and state, the operations it records (polled at
// the requeue the reconcile returns) and the providerID it sets once the VM
// is made. Each of those woke it to read its VM and NIC in Azure again.
// What others change still wakes it: a paused annotation, its deletion, a
// spec change, Cluster API setting its owner.
func TestAzureMachineUpdatesThatWakeIt(t *testing.T) {
	base := func() *infrav1.AzureMachine {
		am := &infrav1.AzureMachine{Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3"}}}
		ownedObject(am, "m", infrav1.MachineFinalizer, clusterv1.GroupVersion.String(), "Machine")
		am.Annotations = map[string]string{controllers.CreatedResourcesAnnotation: `["/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m"]`}
		conditions.Set(am, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
		conditions.Set(am, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionFalse, Reason: controllers.ProvisioningReason, Message: "creating the VM"})
		return am
	}
	const providerID = "azure:///subscriptions/s/resourcegroups/rg/providers/Microsoft.Compute/virtualMachines/m"
	checkWakes(t, controllers.AzureMachineChanged, base, []wakeCase[*infrav1.AzureMachine]{
		{"Ready condition and addresses written", func(am *infrav1.AzureMachine) {
			conditions.Set(am, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionTrue, Reason: controllers.ProvisionedReason})
			am.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.1.0.4"}}
			am.Status.Initialization.Provisioned = ptr.To(true)
		}, false},
		{"operation under way recorded", func(am *infrav1.AzureMachine) {
			am.Annotations[controllers.OperationsAnnotation] = `[{"name":"m","serviceName":"virtualmachines","type":"PUT","data":"tok"}]`
			am.Status.LongRunningOperationStates = infrav1.Futures{{Name: "m", ServiceName: "virtualmachines", Type: "PUT", Data: "tok"}}
		}, false},
		{"providerID set once the VM is made", func(am *infrav1.AzureMachine) { am.Spec.ProviderID = providerID; am.Generation++ }, false},
		{"observedGeneration rewritten", func(am *infrav1.AzureMachine) {
			for i := range am.Status.Conditions {
				am.Status.Conditions[i].ObservedGeneration = 2
			}
		}, false},
		{"resource recorded before it is made", func(am *infrav1.AzureMachine) {
			am.Annotations[controllers.CreatedResourcesAnnotation] = `["/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/m","/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/m-nic"]`
		}, true},
		{"finalizer removed", func(am *infrav1.AzureMachine) { am.Finalizers = nil }, true},
		{"Paused condition written", func(am *infrav1.AzureMachine) {
			conditions.Set(am, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionTrue, Reason: clusterv1.PausedReason})
		}, true},
		{"paused annotation", func(am *infrav1.AzureMachine) { am.Annotations[clusterv1.PausedAnnotation] = "" }, true},
		{"deleted", func(am *infrav1.AzureMachine) { now := metav1.Now(); am.DeletionTimestamp = &now }, true},
		{"owner set", func(am *infrav1.AzureMachine) { am.OwnerReferences[0].UID = "other" }, true},
		{"labelled", func(am *infrav1.AzureMachine) { am.Labels["k"] = "v" }, true},
		{"spec changed", func(am *infrav1.AzureMachine) { am.Spec.AdditionalTags = map[string]string{"k": "v"}; am.Generation++ }, true},
		{"spec changed with the providerID", func(am *infrav1.AzureMachine) {
			am.Spec.ProviderID, am.Spec.VMSize = providerID, "Standard_D4s_v3"
			am.Generation++
		}, true},
		{"resync", nil, true},
	})
}

// TestAzureMachineResyncWakesIt: the cache's periodic resync replays each
// AzureMachine as an update of itself (the same resourceVersion); it
// passes, as through CAPZ's unfiltered watch, or a machine at rest would
// never be looked at again (a VM deleted in Azure never noticed), while
// its own status write (a new resourceVersion) still does not wake it.
func TestAzureMachineResyncWakesIt(t *testing.T) {
	am := &infrav1.AzureMachine{}
	am.Name, am.Namespace, am.Generation, am.ResourceVersion = "m", "ns", 1, "7"
	am.Finalizers = []string{infrav1.MachineFinalizer}
	conditions.Set(am, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason})
	if !controllers.AzureMachineChanged.Update(event.UpdateEvent{ObjectOld: am, ObjectNew: am.DeepCopy()}) {
		t.Error("a resync of the AzureMachine does not wake it")
	}
	written := am.DeepCopy()
	written.ResourceVersion = "8"
	written.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.1.0.4"}}
	if controllers.AzureMachineChanged.Update(event.UpdateEvent{ObjectOld: am, ObjectNew: written}) {
		t.Error("its own status write wakes the AzureMachine")
	}
}

// wakeCase is an update of an object, by change, and whether it wakes the
// object's controller; a nil change is the cache's resync, which replays
// the object as it is.
type wakeCase[T client.Object] struct {
	name   string
	change func(T)
	wakes  bool
}

// checkWakes runs each case through filter: the update from base's object
// to a copy changed by the case, written by the API server (a new
// resourceVersion), or replayed at the same one by a resync.
func checkWakes[T client.Object](t *testing.T, filter predicate.Funcs, base func() T, cases []wakeCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			old.SetResourceVersion("7")
			cur.SetResourceVersion("7")
			if tc.change != nil {
				tc.change(cur)
				cur.SetResourceVersion("8")
			}
			if got := filter.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wakes {
				t.Errorf("the update wakes the %T's controller: %v, want %v", cur, got, tc.wakes)
			}
		})
	}
}

// ownedObject gives o, of cluster c in namespace ns, the metadata its
// controller and Cluster API give it: its finalizer, an owner of kind
// (named as o, of apiVersion), the cluster-name label, no annotations yet.
func ownedObject(o client.Object, name, finalizer, apiVersion, kind string) {
	o.SetName(name)
	o.SetNamespace("ns")
	o.SetGeneration(1)
	o.SetLabels(map[string]string{clusterv1.ClusterNameLabel: "c"})
	o.SetAnnotations(map[string]string{})
	o.SetFinalizers([]string{finalizer})
	o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: "u"}})
}

// recordOperation records an operation under way, in status and in the
// annotation that survives a move, as a reconcile that started it does.
func recordOperation(o client.Object, futures *infrav1.Futures, service string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[controllers.OperationsAnnotation] = `[{"name":"x","serviceName":"` + service + `","type":"PUT","data":"tok"}]`
	o.SetAnnotations(a)
	*futures = infrav1.Futures{{Name: "x", ServiceName: service, Type: "PUT", Data: "tok"}}
}

// setPaused sets a Paused condition, as Cluster API's
// paused.EnsurePausedCondition does.
func setPaused(o conditions.Setter, paused bool) {
	c := metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.NotPausedReason}
	if paused {
		c.Status, c.Reason = metav1.ConditionTrue, clusterv1.PausedReason
	}
	conditions.Set(o, c)
}

// metadataWakes are the changes of any kind's metadata that wake its
// controller: they are others' (a paused annotation, deletion, Cluster API
// setting an owner, a label) or what the reconcile acts on next (its
// finalizer, its Paused condition).
func metadataWakes[T interface {
	client.Object
	conditions.Setter
}]() []wakeCase[T] {
	return []wakeCase[T]{
		{"finalizer removed", func(o T) { o.SetFinalizers(nil) }, true},
		{"Paused condition written", func(o T) { setPaused(o, true) }, true},
		{"paused annotation", func(o T) {
			a := o.GetAnnotations()
			a[clusterv1.PausedAnnotation] = ""
			o.SetAnnotations(a)
		}, true},
		{"deleted", func(o T) { now := metav1.Now(); o.SetDeletionTimestamp(&now) }, true},
		{"owner set", func(o T) {
			refs := o.GetOwnerReferences()
			refs[0].UID = "other"
			o.SetOwnerReferences(refs)
		}, true},
		{"labelled", func(o T) {
			l := o.GetLabels()
			l["k"] = "v"
			o.SetLabels(l)
		}, true},
		{"resync", nil, true},
	}
}

// TestAzureMachinePoolUpdatesThatWakeIt: of a pool's own writes while it
// comes up, those its next reconcile acts on wake it (its finalizer, the
// scale set it records before making it, its Paused condition), and those
// that only report do not: its conditions, replicas, computer-name prefix,
// pinned image, the operations it records (polled at the requeue it
// returns), the providerID and providerIDList it sets and the tags it
// applied. Each of those woke it to read the scale set and list its
// instances again. Others' changes still wake it, the resync too.
func TestAzureMachinePoolUpdatesThatWakeIt(t *testing.T) {
	const setID = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/p"
	base := func() *infrav1.AzureMachinePool {
		amp := &infrav1.AzureMachinePool{Spec: infrav1.AzureMachinePoolSpec{Template: infrav1.AzureVMSpec{VMSize: "Standard_D4s_v3"}}}
		ownedObject(amp, "p", infrav1.MachinePoolFinalizer, clusterv1.GroupVersion.String(), "MachinePool")
		amp.Annotations = map[string]string{controllers.CreatedResourcesAnnotation: `["` + setID + `"]`}
		setPaused(amp, false)
		conditions.Set(amp, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionFalse, Reason: controllers.ProvisioningReason, Message: "updating the scale set"})
		return amp
	}
	checkWakes(t, controllers.AzureMachinePoolChanged, base, append([]wakeCase[*infrav1.AzureMachinePool]{
		{"Ready condition, replicas and provisioned written", func(amp *infrav1.AzureMachinePool) {
			conditions.Set(amp, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionTrue, Reason: controllers.ProvisionedReason})
			amp.Status.Replicas, amp.Status.Ready = 2, true
			amp.Status.Initialization.Provisioned = ptr.To(true)
		}, false},
		{"computer-name prefix and image pinned", func(amp *infrav1.AzureMachinePool) {
			amp.Status.ComputerNamePrefix, amp.Status.InfrastructureMachineKind = "win-p", "AzureMachinePoolMachine"
			amp.Status.Image = &infrav1.Image{Marketplace: &infrav1.MarketplaceImage{Publisher: "cncf-upstream", Offer: "capi-windows", SKU: "windows-2022-containerd-gen1", Version: "136.3.20261101"}}
		}, false},
		{"operation under way recorded", func(amp *infrav1.AzureMachinePool) {
			recordOperation(amp, &amp.Status.LongRunningOperationStates, "scalesets")
		}, false},
		{"providerID and providerIDList set", func(amp *infrav1.AzureMachinePool) {
			amp.Spec.ProviderID = "azure://" + setID
			amp.Spec.ProviderIDList = []string{"azure://" + setID + "/virtualMachines/0"}
			amp.Generation++
		}, false},
		{"applied tags recorded", func(amp *infrav1.AzureMachinePool) { amp.Annotations[tags.LastAppliedAnnotation] = `{"team":"a"}` }, false},
		{"resource recorded before it is made", func(amp *infrav1.AzureMachinePool) {
			amp.Annotations[controllers.CreatedResourcesAnnotation] = `["` + setID + `","/subscriptions/s/resourceGroups/rg/providers/Microsoft.Authorization/roleAssignments/r"]`
		}, true},
		{"spec changed", func(amp *infrav1.AzureMachinePool) { amp.Spec.Template.VMSize = "Standard_D8s_v3"; amp.Generation++ }, true},
		{"spec changed with the providerIDList", func(amp *infrav1.AzureMachinePool) {
			amp.Spec.ProviderIDList = []string{"azure://" + setID + "/virtualMachines/0"}
			amp.Spec.AdditionalTags = map[string]string{"team": "a"}
			amp.Generation++
		}, true},
	}, metadataWakes[*infrav1.AzureMachinePool]()...))
}

// TestAzureMachinePoolMachineUpdatesThatWakeIt: an instance's own reports
// (its conditions, computer name, addresses, state, the Run Commands
// reading its bootstrap log) do not wake it again; the pool's changes to
// its spec (the providerID rewritten) and owners, Cluster API's (its
// Machine as owner, the delete-machine annotation), its deletion and the
// resync do.
func TestAzureMachinePoolMachineUpdatesThatWakeIt(t *testing.T) {
	base := func() *infrav1.AzureMachinePoolMachine {
		m := &infrav1.AzureMachinePoolMachine{Spec: infrav1.AzureMachinePoolMachineSpec{InstanceID: "0",
			ProviderID: "azure:///subscriptions/s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/p/virtualMachines/0"}}
		ownedObject(m, "p-0", infrav1.MachinePoolMachineFinalizer, infrav1.GroupVersion.String(), "AzureMachinePool")
		m.Labels[infrav1.MachinePoolNameLabel] = "p"
		setPaused(m, false)
		conditions.Set(m, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionFalse, Reason: controllers.ProvisioningReason, Message: "instance is Creating"})
		return m
	}
	checkWakes(t, controllers.AzureMachinePoolMachineChanged, base, append([]wakeCase[*infrav1.AzureMachinePoolMachine]{
		{"instance reported", func(m *infrav1.AzureMachinePoolMachine) {
			m.Status.ComputerName, m.Status.ProvisioningState, m.Status.LatestModelApplied = "win-p000000", "Succeeded", true
			m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.1.0.4"}}
			m.Status.Initialization.Provisioned = ptr.To(true)
			conditions.Set(m, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionFalse, Reason: controllers.WaitingForNodeReason})
			conditions.Set(m, metav1.Condition{Type: controllers.BootstrapSucceededCondition, Status: metav1.ConditionFalse, Reason: controllers.WaitingForNodeReason})
		}, false},
		{"Run Command recorded", func(m *infrav1.AzureMachinePoolMachine) {
			recordOperation(m, &m.Status.LongRunningOperationStates, "runcommand")
		}, false},
		{"providerID rewritten by the pool", func(m *infrav1.AzureMachinePoolMachine) {
			m.Spec.ProviderID = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/p/virtualMachines/0"
			m.Generation++
		}, true},
		{"chosen for deletion", func(m *infrav1.AzureMachinePoolMachine) { m.Annotations[clusterv1.DeleteMachineAnnotation] = "" }, true},
		{"its Machine made its controller", func(m *infrav1.AzureMachinePoolMachine) {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: "p-0", UID: "m", Controller: ptr.To(true)})
		}, true},
	}, metadataWakes[*infrav1.AzureMachinePoolMachine]()...))
}

// TestAzureClusterUpdatesThatWakeIt: of an AzureCluster's own writes, its
// conditions, failure domains, provisioned, the operations it records,
// the control-plane endpoint it sets once and the tags it applied do not
// wake it (each woke it to read every network resource in Azure again);
// the subnets of a user's VNet it records before adding them, its
// finalizer, its Paused condition and others' changes do, as does an
// endpoint changed once set, which the webhook refuses and the reconcile
// never makes.
func TestAzureClusterUpdatesThatWakeIt(t *testing.T) {
	const subnetID = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/node"
	base := func() *infrav1.AzureCluster {
		ac := &infrav1.AzureCluster{Spec: infrav1.AzureClusterSpec{SubscriptionID: "s", Location: "westeurope", ResourceGroup: "rg"}}
		ownedObject(ac, "c", infrav1.ClusterFinalizer, clusterv1.GroupVersion.String(), "Cluster")
		ac.Annotations[tags.ClusterUIDAnnotation] = "u"
		setPaused(ac, false)
		conditions.Set(ac, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionFalse, Reason: controllers.ProvisioningReason, Message: "creating vnets c"})
		return ac
	}
	endpoint := clusterv1.APIEndpoint{Host: "127.0.0.9", Port: 6443}
	checkWakes(t, controllers.AzureClusterChanged, base, append([]wakeCase[*infrav1.AzureCluster]{
		{"Ready condition, failure domains and provisioned written", func(ac *infrav1.AzureCluster) {
			conditions.Set(ac, metav1.Condition{Type: controllers.ReadyCondition, Status: metav1.ConditionTrue, Reason: controllers.ProvisionedReason})
			ac.Status.FailureDomains = []clusterv1.FailureDomain{{Name: "1", ControlPlane: ptr.To(true)}}
			ac.Status.Initialization.Provisioned = ptr.To(true)
		}, false},
		{"operation under way recorded", func(ac *infrav1.AzureCluster) {
			recordOperation(ac, &ac.Status.LongRunningOperationStates, "loadbalancers")
		}, false},
		{"control-plane endpoint set", func(ac *infrav1.AzureCluster) { ac.Spec.ControlPlaneEndpoint = endpoint; ac.Generation++ }, false},
		{"applied tags recorded", func(ac *infrav1.AzureCluster) { ac.Annotations[tags.LastAppliedAnnotation] = `{}` }, false},
		{"subnet recorded before it is added", func(ac *infrav1.AzureCluster) {
			ac.Annotations[controllers.CreatedResourcesAnnotation] = `["` + subnetID + `"]`
		}, true},
		{"spec changed", func(ac *infrav1.AzureCluster) {
			ac.Spec.AdditionalTags = map[string]string{"team": "a"}
			ac.Generation++
		}, true},
		{"spec changed with the endpoint", func(ac *infrav1.AzureCluster) {
			ac.Spec.ControlPlaneEndpoint, ac.Spec.AdditionalTags = endpoint, map[string]string{"team": "a"}
			ac.Generation++
		}, true},
	}, metadataWakes[*infrav1.AzureCluster]()...))
	// Once set, the endpoint is not the reconcile's to change.
	set := base()
	set.Spec.ControlPlaneEndpoint, set.ResourceVersion = endpoint, "7"
	moved := set.DeepCopy()
	moved.Spec.ControlPlaneEndpoint.Host, moved.ResourceVersion, moved.Generation = "127.0.0.10", "8", 2
	if !controllers.AzureClusterChanged.Update(event.UpdateEvent{ObjectOld: set, ObjectNew: moved}) {
		t.Error("a change of an endpoint already set does not wake the AzureCluster")
	}
}
