package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	events "k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/paused"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/machinelogs"
	"github.com/winkube/winkube/internal/azure/tags"
)

// AzureMachinePoolMachineReconciler mirrors one scale-set instance into its
// AzureMachinePoolMachine and deletes the instance when the object goes.
type AzureMachinePoolMachineReconciler struct {
	Client client.Client
	// Reader reads an instance's Machine live when the instance's object
	// goes: a cached read that lags the Machine's creation would leave it
	// behind (Client when nil).
	Reader client.Reader
	Cloud  *cloud.Cloud
	// Identities resolves the cluster's identity to its services.
	Identities *Identities
	Requeue    time.Duration
	// MinThrottleWait is the shortest wait after a 429 (see
	// Options.MinThrottleWait).
	MinThrottleWait time.Duration
	// BootstrapTimeout is how long a provisioned instance may take to
	// become a node before its bootstrap is called failed and its log read
	// (DefaultPoolBootstrapTimeout when zero).
	BootstrapTimeout time.Duration
	// Recorder records the instance's Events; the manager's when nil.
	Recorder events.EventRecorder

	boot bootstrapWatch
	// sets remembers which objects' scale sets were shown to be their
	// pool's (proveScaleSet).
	sets provenSets
}

// SetupWithManager registers the controller.
func (r *AzureMachinePoolMachineReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	if r.Identities == nil {
		ids, err := newIdentities(mgr, r.Cloud, Options{})
		if err != nil {
			return err
		}
		r.Identities = ids
	}
	if r.boot.slots == nil {
		r.boot.slots = newRunCommandSlots(DefaultRunCommandConcurrency)
	}
	if r.BootstrapTimeout == 0 {
		r.BootstrapTimeout = DefaultPoolBootstrapTimeout
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("azuremachinepoolmachine-controller")
	}
	// The instance's Machine (Cluster API's MachinePool controller makes
	// one per instance) says when its node has registered.
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureMachinePoolMachine{}, builder.WithPredicates(azureMachinePoolMachineChanged)).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToPoolMachine), builder.WithPredicates(predicate.Or[client.Object](machineChanged, nodeReadyChanged))).
		WithOptions(opts).Named("azuremachinepoolmachine").Complete(r)
}

// Reconcile mirrors or deletes one instance.
func (r *AzureMachinePoolMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	defer requeueWhenThrottled(ctx, r.MinThrottleWait, &res, &reterr)
	// The shared opening only: scope.load's rules do not fit, as the owner
	// is the AzureMachinePool (read by label below), and the pool or the
	// Cluster may be missing outside deletion too.
	s, err := openScope[*clusterv1.Machine](ctx, r.Client, req.NamespacedName, &infrav1.AzureMachinePoolMachine{})
	if s == nil {
		return ctrl.Result{}, err
	}
	defer s.close(ctx, &reterr)
	m, deleting := s.obj, s.deleting
	pool := &infrav1.AzureMachinePool{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Labels[infrav1.MachinePoolNameLabel]}, pool); {
	case gone(err):
		pool = nil
	case err != nil:
		// Only NotFound says the pool is gone; the finalizer stays.
		return ctrl.Result{}, readBlocked(m, deleting, "the AzureMachinePool", err)
	}
	if cluster, err := util.GetClusterFromMetadata(ctx, r.Client, m.ObjectMeta); err == nil {
		isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, m)
		s.written = requeue && err == nil
		if err != nil || isPaused || requeue {
			return ctrl.Result{}, err
		}
	} else if !gone(err) && !errors.Is(err, util.ErrNoCluster) {
		return ctrl.Result{}, readBlocked(m, deleting, "the Cluster", err)
	}
	if deleting {
		return r.reconcileDelete(ctx, m, pool)
	}
	var svc *cloud.Services
	var n clusterNames
	var clusterName string
	if pool != nil {
		cluster, err := util.GetClusterFromMetadata(ctx, r.Client, m.ObjectMeta)
		if err != nil {
			return ctrl.Result{}, readBlocked(m, false, "the Cluster", err)
		}
		clusterName = cluster.Name
		ac := &infrav1.AzureCluster{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: cluster.Spec.InfrastructureRef.Name}, ac); err != nil {
			return ctrl.Result{}, readBlocked(m, false, "the AzureCluster", err)
		}
		if svc, err = r.Identities.Services(ctx, ac); err != nil {
			return ctrl.Result{}, err
		}
		dropForeignTokens(m, svc)
		n, _ = namesOf(ac, cluster.Name)
	}
	if controllerutil.AddFinalizer(m, infrav1.MachinePoolMachineFinalizer) {
		return ctrl.Result{RequeueAfter: persisted}, nil
	}
	if err := r.copyDeleteMark(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	if svc == nil || n.rg == "" {
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	if res, ok, err := r.proveScaleSet(ctx, m, pool, svc, n.rg, clusterName); !ok {
		return res, err
	}
	in, found, err := svc.ScaleSets.Instance(ctx, n.rg, pool.Name, m.Spec.InstanceID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if found {
		m.Status.ComputerName = in.ComputerName
		m.Status.ProvisioningState = in.ProvisioningState
		m.Status.LatestModelApplied = in.LatestModelApplied
		m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: in.ComputerName}}
		if in.PrivateIP != "" {
			m.Status.Addresses = append(m.Status.Addresses, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: in.PrivateIP})
		}
		if in.ProvisioningState == "Succeeded" {
			m.Status.Initialization.Provisioned = ptr.To(true)
			// Whether the instance must be replaced is the pool's to
			// decide (Instance.Current): Azure's latestModelApplied stays
			// false after a write of new custom data alone, and polling
			// it would read the instance every few seconds forever.
			machine, err := util.GetOwnerMachine(ctx, r.Client, m.ObjectMeta)
			if err != nil || machine == nil {
				// Not yet owned: the Machine's creation wakes this one.
				setReady(m, metav1.ConditionFalse, WaitingForNodeReason, "provisioned; waiting for Cluster API's Machine of this instance")
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			// Ready only once the instance's node is: a pool's rollout
			// counts an instance available by it (poolrollout.go), as
			// CAPZ's does (azure/scope/machinepoolmachine.go
			// UpdateNodeStatus, CAPZ 69ec3a40). Cluster API's Machine
			// mirrors the node's Ready condition as NodeReady.
			if c := conditions.Get(machine, clusterv1.MachineNodeReadyCondition); hasNode(machine) && c != nil && c.Status == metav1.ConditionTrue {
				setReady(m, metav1.ConditionTrue, ProvisionedReason, "")
			} else {
				msg := "provisioned; waiting for its node to register"
				if hasNode(machine) {
					msg = "node " + machine.Status.NodeRef.Name + " is not Ready"
					if c != nil && c.Message != "" {
						msg += ": " + c.Message
					}
				}
				setReady(m, metav1.ConditionFalse, WaitingForNodeReason, msg)
			}
			return r.boot.observe(ctx, machineBootstrap{obj: m, uid: m.UID, nodeRef: hasNode(machine), timeout: r.BootstrapTimeout,
				target: machinelogs.Target{ResourceGroup: n.rg, ScaleSet: pool.Name, InstanceID: m.Spec.InstanceID, Windows: pool.Spec.Template.OS() == infrav1.Windows},
				logs:   svc.BootLogs, futures: &m.Status.LongRunningOperationStates,
				recorder: func(typ, reason, msg string) {
					if r.Recorder != nil {
						r.Recorder.Eventf(m, typ, reason, "%s", msg)
					}
				}}), nil
		}
		if in.ProvisioningState == "Failed" {
			// Replacing it is the pool's (selectToDelete), which deletes
			// this object's Machine: one deleter, so that its deletion is
			// not asked of Azure twice.
			msg := "instance is Failed: its AzureMachinePool deletes it and makes a new one"
			if ptr.Deref(m.Status.Initialization.Provisioned, false) {
				msg = "instance is Failed in Azure after it had provisioned (an extension or a model update failed, say): it is kept, as its node may still serve; delete its Machine to replace it"
			}
			setReady(m, metav1.ConditionFalse, VMFailedReason, msg)
			return ctrl.Result{RequeueAfter: r.Requeue}, nil
		}
		setReady(m, metav1.ConditionFalse, ProvisioningReason, "instance is "+in.ProvisioningState)
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	// The instance is gone (deleted outside winkube): so is this object,
	// with its Machine.
	return ctrl.Result{}, deleteThroughMachine(ctx, r.Client, r.reader(), m)
}

// copyDeleteMark marks the object for its pool's next scale-down when its
// Machine is: users annotate Machines (cluster.x-k8s.io/delete-machine, as
// they do a MachineDeployment's), Cluster API does not carry it to the
// infrastructure object, and the pool chooses by the objects. CAPZ copies
// it so at every reconcile (azure/scope/machinepoolmachine.go,
// MachinePoolMachineScope.Close calling updateDeleteMachineAnnotation,
// CAPZ b81d0c74), and, as there, a mark removed from the Machine stays on
// the object. The pool wakes on the object's mark (poolMachineChanged).
func (r *AzureMachinePoolMachineReconciler) copyDeleteMark(ctx context.Context, m *infrav1.AzureMachinePoolMachine) error {
	if marked(m) {
		return nil
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, m.ObjectMeta)
	if err != nil || machine == nil {
		return client.IgnoreNotFound(err)
	}
	if _, ok := machine.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[clusterv1.DeleteMachineAnnotation] = "true"
	}
	return nil
}

// provenSets are, per AzureMachinePoolMachine, the scale set (and pool,
// cluster and ARM endpoint) that was shown to be its pool's: proven once,
// not on every reconcile (a scale set's role tag is written with it and
// does not change). A manager that restarts proves each again, once.
type provenSets struct {
	mu sync.Mutex
	m  map[types.UID]string
}

func (p *provenSets) has(uid types.UID, key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[uid] == key
}

func (p *provenSets) set(uid types.UID, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if key == "" {
		delete(p.m, uid)
		return
	}
	if p.m == nil {
		p.m = map[types.UID]string{}
	}
	p.m[uid] = key
}

// proveScaleSet lets the object mirror an instance, and run Run Command on
// it at its bootstrap deadline, only if the scale set it reads is its
// pool's: tagged as the cluster's, with the pool's role (as the pool
// proves its own records, ownership.go). Everything that names the
// instance is the tenant's to write (the pool label, the pool's name, the
// AzureCluster's resource group, the instance ID): without this, an object
// could name another namespace's scale set and read its instance's name
// and address, and have the manager run commands on it. ok is false when
// the reconcile stops here (a condition says why).
func (r *AzureMachinePoolMachineReconciler) proveScaleSet(ctx context.Context, m *infrav1.AzureMachinePoolMachine, pool *infrav1.AzureMachinePool, svc *cloud.Services, rg, clusterName string) (res ctrl.Result, ok bool, err error) {
	id := armID(svc.Subscription, rg, "Microsoft.Compute", "virtualMachineScaleSets", pool.Name)
	key := strings.Join([]string{svc.ResourceManager, strings.ToLower(id), string(pool.UID), clusterName}, " ")
	if r.sets.has(m.UID, key) {
		return ctrl.Result{}, true, nil
	}
	set, err := svc.ScaleSets.Get(ctx, rg, pool.Name)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if set == nil {
		// Nothing to mirror: the instance is found missing next, and the
		// object goes with its Machine.
		return ctrl.Result{}, true, nil
	}
	owner, err := ownerOf(ctx, r.Client, clusterName, m.Namespace)
	if err != nil {
		return ctrl.Result{}, false, readBlocked(m, false, "the AzureClusters", err)
	}
	var u *errUnprovable
	if err := (&proof{owner: owner, role: poolRole(pool)}).tagged(id, set.Tags); errors.As(err, &u) {
		r.sets.set(m.UID, "")
		msg := fmt.Sprintf("scale set %s in resource group %s is not the scale set of AzureMachinePool %s (%s): winkube neither mirrors its instance %s into this object nor runs anything on it",
			pool.Name, rg, pool.Name, u.why, m.Spec.InstanceID)
		if c := conditions.Get(m, ReadyCondition); r.Recorder != nil && (c == nil || c.Message != msg) {
			r.Recorder.Eventf(m, corev1.EventTypeWarning, ResourceNotOwnedReason, "%s", msg)
		}
		setReady(m, metav1.ConditionFalse, ResourceNotOwnedReason, msg)
		// Nothing tells when the pool's scale set is made or retagged:
		// look again now and then.
		return ctrl.Result{RequeueAfter: time.Minute}, false, nil
	}
	r.sets.set(m.UID, key)
	return ctrl.Result{}, true, nil
}

func (r *AzureMachinePoolMachineReconciler) reader() client.Reader {
	if r.Reader == nil {
		return r.Client
	}
	return r.Reader
}

// release lets the object go once its instance is: the Machine Cluster API
// made for it goes too. A Machine made after the object was deleted
// directly (Cluster API's MachinePool makes one for each object it lists,
// those being deleted included, and the pool deletes an object directly
// while it has no Machine yet) would be left without infrastructure,
// pending forever where no garbage collector runs, and a Cluster being
// deleted waits for it.
func (r *AzureMachinePoolMachineReconciler) release(ctx context.Context, m *infrav1.AzureMachinePoolMachine) error {
	machine, err := instanceMachine(ctx, r.reader(), m)
	if err != nil {
		return err
	}
	if machine != nil && machine.DeletionTimestamp.IsZero() {
		log.FromContext(ctx).Info("deleting the Machine of an instance that is gone", "machine", machine.Name)
		if err := r.Client.Delete(ctx, machine); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Machine %s of instance %s: %w", machine.Name, m.Spec.InstanceID, err)
		}
	}
	controllerutil.RemoveFinalizer(m, infrav1.MachinePoolMachineFinalizer)
	r.sets.set(m.UID, "")
	return nil
}

// reconcileDelete deletes the instance its provider ID names (which needs
// neither the pool nor the cluster). While the pool is being deleted, its
// scale set's deletion takes the instance: the finalizer then waits until
// Azure no longer has it.
func (r *AzureMachinePoolMachineReconciler) reconcileDelete(ctx context.Context, m *infrav1.AzureMachinePoolMachine, pool *infrav1.AzureMachinePool) (ctrl.Result, error) {
	setReady(m, metav1.ConditionFalse, DeletingReason, "deleting the scale-set instance")
	if m.Spec.ProviderID == "" {
		// The pool makes these objects from instances, provider ID
		// included: an object without one names no instance.
		return ctrl.Result{}, r.release(ctx, m)
	}
	id, err := arm.ParseResourceID(strings.TrimPrefix(m.Spec.ProviderID, "azure://"))
	if err != nil || id.Parent == nil {
		return ctrl.Result{}, blocked(m, "instance "+m.Spec.ProviderID, fmt.Errorf("the provider ID is not a scale-set instance's ARM ID: %w", err))
	}
	rg, set, instance := id.ResourceGroupName, id.Parent.Name, id.Name
	svc, err := r.Identities.ServicesFor(ctx, m, id.SubscriptionID)
	if err != nil {
		return ctrl.Result{}, blocked(m, "instance "+instance+" (Azure credentials)", err)
	}
	dropForeignTokens(m, svc)
	if pool != nil && !pool.DeletionTimestamp.IsZero() {
		exists, err := svc.ScaleSets.InstanceExists(ctx, rg, set, instance)
		if err != nil {
			return ctrl.Result{}, blocked(m, "instance "+instance+" of scale set "+set+" (reading it)", err)
		}
		if exists {
			setReady(m, metav1.ConditionFalse, DeletingReason, "waiting for the deletion of scale set "+set+" to remove instance "+instance)
			return ctrl.Result{RequeueAfter: r.Requeue}, nil
		}
		return ctrl.Result{}, r.release(ctx, m)
	}
	s := step{"scalesetvms", instance}
	tok := token(m.Status.LongRunningOperationStates, s, "DELETE")
	if tok == "" {
		// The provider ID is written by whoever creates the object: the
		// instance is deleted only if its scale set is a pool's of this
		// namespace (its role tag, tags.ObjectRole, names the namespace).
		cur, err := svc.ScaleSets.Get(ctx, rg, set)
		if err != nil {
			return ctrl.Result{}, blocked(m, "scale set "+set+" (reading it)", err)
		}
		if cur != nil && !strings.HasPrefix(ptr.Deref(cur.Tags[tags.RoleKey], ""), tags.ObjectRole("machinepool", m.Namespace, "")) {
			if r.Recorder != nil {
				r.Recorder.Eventf(m, corev1.EventTypeWarning, RecordDroppedReason,
					"instance %s is not of a scale set of a pool of namespace %s: winkube does not delete it", m.Spec.ProviderID, m.Namespace)
			}
			return ctrl.Result{}, r.release(ctx, m)
		}
	}
	next, done, err := svc.ScaleSets.DeleteInstance(ctx, rg, set, instance, tok)
	record(&m.Status.LongRunningOperationStates, s, rg, "DELETE", next)
	if err != nil {
		return ctrl.Result{}, blocked(m, "instance "+instance+" of scale set "+set, err)
	}
	if !done {
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	return ctrl.Result{}, r.release(ctx, m)
}
