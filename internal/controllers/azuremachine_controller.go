package controllers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	events "k8s.io/client-go/tools/record"
	"math/big"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/availabilitysets"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/inboundnatrules"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/machinelogs"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/providerid"
	"github.com/winkube/winkube/internal/azure/tags"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/naming"
)

// AdminUsername is the admin user of every node, as in CAPZ.
const AdminUsername = "capi"

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azuremachines;azuremachines/status;azuremachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;machines/status,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// AzureMachineReconciler provisions the VM of a Machine.
type AzureMachineReconciler struct {
	Client client.Client
	Cloud  *cloud.Cloud
	// Identities resolves the cluster's identity to its services.
	Identities *Identities
	Requeue    time.Duration
	// MinThrottleWait is the shortest wait after a 429 (see
	// Options.MinThrottleWait).
	MinThrottleWait time.Duration
	// Recorder records the machine's Events; the manager's when nil.
	Recorder events.EventRecorder
	// BootstrapTimeout is how long a provisioned VM may take to become a
	// node before its bootstrap is called failed and its log read
	// (DefaultBootstrapTimeout when zero).
	BootstrapTimeout time.Duration
	// RoleAssignmentScopes are where, beyond the cluster's resource group,
	// the manager grants a machine's identity its role (Options).
	RoleAssignmentScopes []string

	boot bootstrapWatch
}

// SetupWithManager registers the controller.
func (r *AzureMachineReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	if r.boot.slots == nil {
		r.boot.slots = newRunCommandSlots(DefaultRunCommandConcurrency)
	}
	if r.BootstrapTimeout == 0 {
		r.BootstrapTimeout = DefaultBootstrapTimeout
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("azuremachine-controller")
	}
	if r.Identities == nil {
		ids, err := newIdentities(mgr, r.Cloud, Options{})
		if err != nil {
			return err
		}
		r.Identities = ids
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureMachine{}, builder.WithPredicates(azureMachineChanged)).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToAzureMachine), builder.WithPredicates(machineChanged)).
		// Only the Cluster changes this controller waits for (paused or
		// resumed, infrastructure provisioned), as Cluster API's and CAPZ's
		// machine controllers do: Cluster API updates a Cluster's status
		// for every machine that comes or goes, and each update would
		// wake all of the cluster's machines.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToObjects(r.Client, func() client.ObjectList { return &infrav1.AzureMachineList{} })),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), mgr.GetLogger()))).
		WithOptions(opts).Named("azuremachine").Complete(r)
}

// Reconcile brings one AzureMachine's VM to its spec.
func (r *AzureMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	defer requeueWhenThrottled(ctx, r.MinThrottleWait, &res, &reterr)
	ctx = async.WithWait(ctx)
	s, err := openScope[*clusterv1.Machine](ctx, r.Client, req.NamespacedName, &infrav1.AzureMachine{})
	if s == nil {
		return ctrl.Result{}, err
	}
	defer s.close(ctx, &reterr)
	if stop, err := s.load(ctx, r.Client, machineOwner); stop {
		return ctrl.Result{}, err
	}
	am, machine, cluster, deleting := s.obj, s.owner, s.cluster, s.deleting
	if deleting {
		// What to delete is in the machine's own status: the AzureCluster
		// is not needed (and may be gone).
		return r.reconcileDelete(ctx, am)
	}
	ac := &infrav1.AzureCluster{}
	if cluster != nil {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: am.Namespace, Name: cluster.Spec.InfrastructureRef.Name}, ac); err != nil {
			return ctrl.Result{}, readBlocked(am, false, "the AzureCluster", err)
		}
	}
	return r.reconcileNormal(ctx, am, ac, machine, cluster)
}

func vmNameOf(am *infrav1.AzureMachine) string {
	return naming.VMName(am.Name, am.Spec.OS() == infrav1.Windows)
}

// machineRole tags a VM with the object it belongs to, so that a VM of the
// same name made for another machine is recognised as a conflict.
func machineRole(am *infrav1.AzureMachine) string {
	return tags.ObjectRole("machine", am.Namespace, am.Name)
}

// machineScope is what the phases of an AzureMachine's reconcile share.
type machineScope struct {
	am      *infrav1.AzureMachine
	ac      *infrav1.AzureCluster
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
}

func (r *AzureMachineReconciler) reconcileNormal(ctx context.Context, am *infrav1.AzureMachine, ac *infrav1.AzureCluster, machine *clusterv1.Machine, cluster *clusterv1.Cluster) (ctrl.Result, error) {
	return runPhases(ctx, &machineScope{am: am, ac: ac, machine: machine, cluster: cluster},
		r.holdFinalizer, r.waitForPrerequisites,
		func(ctx context.Context, ms *machineScope) (*ctrl.Result, error) {
			return stop(r.reconcileVM(ctx, ms.am, ms.ac, ms.machine, ms.cluster))
		})
}

// holdFinalizer saves the finalizer before anything is created.
func (r *AzureMachineReconciler) holdFinalizer(_ context.Context, ms *machineScope) (*ctrl.Result, error) {
	if controllerutil.AddFinalizer(ms.am, infrav1.MachineFinalizer) {
		return &ctrl.Result{RequeueAfter: persisted}, nil
	}
	return nil, nil
}

// waitForPrerequisites waits for the cluster's infrastructure and the
// bootstrap data, and stops at a terminal failure: the Machine must be
// replaced.
func (r *AzureMachineReconciler) waitForPrerequisites(_ context.Context, ms *machineScope) (*ctrl.Result, error) {
	am, machine, cluster := ms.am, ms.machine, ms.cluster
	if cluster == nil || !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		setReady(am, metav1.ConditionFalse, WaitingForClusterInfraReason, "waiting for the cluster's infrastructure")
		return &ctrl.Result{}, nil
	}
	if res := waitForAzureCluster(am, ms.ac); res != nil {
		return res, nil
	}
	if machine.Spec.Bootstrap.DataSecretName == nil {
		setReady(am, metav1.ConditionFalse, WaitingForBootstrapDataReason, "waiting for the bootstrap provider's data secret")
		return &ctrl.Result{}, nil
	}
	if cond := conditions.Get(am, ReadyCondition); cond != nil && (cond.Reason == VMProvisionFailedReason || cond.Reason == VMDeletedReason) {
		// Terminal: the Machine must be replaced. The state goes with the
		// condition, should the write that set the condition have lost it.
		if cond.Reason == VMDeletedReason {
			am.Status.VMState = "Deleted"
		}
		return &ctrl.Result{}, nil
	}
	return nil, nil
}

// reconcileVM makes the machine's VM and what it needs (NIC, NAT rule,
// availability set, role assignment), each step resumable, and reports it.
func (r *AzureMachineReconciler) reconcileVM(ctx context.Context, am *infrav1.AzureMachine, ac *infrav1.AzureCluster, machine *clusterv1.Machine, cluster *clusterv1.Cluster) (ctrl.Result, error) {
	svc, err := r.Identities.Services(ctx, ac)
	if ie := (*identityError)(nil); errors.As(err, &ie) {
		setReady(am, metav1.ConditionFalse, ie.reason, ie.msg)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	owner, err := ownerOf(ctx, r.Client, cluster.Name, am.Namespace)
	if err != nil {
		return ctrl.Result{}, readBlocked(am, false, "the AzureClusters", err)
	}
	ctx = tags.WithAdoptUnscoped(ctx, owner.AdoptUnscoped)
	r.dropForeignTokens(am, svc)
	n, err := namesOf(ac, cluster.Name)
	if err != nil {
		setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
		return ctrl.Result{}, nil
	}
	checkCloudProviderCredentials(ctx, r.Identities, am, &am.Spec.AzureVMSpec, ac)
	vmName := vmNameOf(am)
	am.Status.VMName = vmName
	role := machineRole(am)
	isCP := util.IsControlPlaneMachine(machine)

	if token(am.Status.LongRunningOperationStates, step{"virtualmachines", vmName}, "DELETE") != "" {
		return r.deletionInterrupted(am, vmName)
	}
	vmStep := step{"virtualmachines", vmName}
	vmToken := token(am.Status.LongRunningOperationStates, vmStep, "PUT")
	// While this machine's PUT of its VM is under way, the operation is
	// polled and the VM not read: it was read (and found to be none of
	// another's) before the PUT, as CAPZ polls an operation under way
	// without reading its resource (azure/services/async/async.go
	// CreateResource @0da94738). Each reconcile of a VM being created
	// used to read it too.
	var existing *armcompute.VirtualMachine
	if vmToken == "" {
		// Azure would treat a second machine with this VM name as the first one's VM.
		existing, err = svc.VMs.Get(ctx, n.rg, vmName)
		if err != nil {
			return r.azureError(am, "reading VM", err)
		} else if existing == nil && am.Spec.ProviderID != "" {
			return r.vanished(am, vmName)
		} else if existing != nil && ptr.Deref(existing.Tags[tags.RoleKey], "") != role {
			r.dropForeignClaims(ctx, svc, am, n.rg, vmName)
			setReady(am, metav1.ConditionFalse, VMNameConflictReason, fmt.Sprintf("VM %s already exists and belongs to %s: rename this machine so that its Windows name differs", vmName, ptr.Deref(existing.Tags[tags.RoleKey], "something else")))
			return ctrl.Result{}, nil
		}
	}
	avSetGroup := availabilitySetGroup(ac, machine)
	avSet := ""
	if avSetGroup != "" {
		avSet = availabilitysets.Name(cluster.Name, avSetGroup)
	}
	if res, ok, err := r.claimResources(ctx, svc, am, ac.Spec.SubscriptionID, n, vmName, isCP, avSet); !ok {
		return res, err
	}

	img, err := svc.Images.Resolve(ctx, am.Spec.Image, images.Request{
		Location: ac.Spec.Location, KubernetesVersion: machine.Spec.Version, OS: am.Spec.OS(),
		WindowsVersion: am.Spec.WindowsServerVersion, Runtime: am.Spec.ContainerRuntime,
	})
	if err != nil {
		if fromAzure(err) {
			// Listing the images failed (a 429, a 5xx, no answer): the
			// request is retried with backoff, not parked.
			reportAzureError(am, "choosing the image", err)
			return ctrl.Result{}, fmt.Errorf("choosing the image: %w", err)
		}
		setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, "choosing the image: "+err.Error())
		return ctrl.Result{}, nil
	}
	size, offered, err := svc.SKUs.VMSize(ctx, ac.Spec.Location, am.Spec.VMSize)
	if err != nil {
		return r.azureError(am, "reading the VM size's capabilities", err)
	}
	if !offered {
		setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, fmt.Sprintf("VM size %s is not offered in %s: choose one that `az vm list-skus --location %s --resource-type virtualMachines` lists", am.Spec.VMSize, ac.Spec.Location, ac.Spec.Location))
		return ctrl.Result{}, nil
	}
	if existing == nil && vmToken == "" {
		// Checked before anything is made for the VM; a VM that runs
		// keeps running whatever its size's offer becomes.
		reason, msg, err := placementProblem(ctx, svc, ac.Spec.Location, size, machine.Spec.FailureDomain, vmImage(img), am.Spec.AcceleratedNetworking)
		if err != nil {
			return r.azureError(am, "reading the image's generation", err)
		}
		if reason != "" {
			if cond := conditions.Get(am, ReadyCondition); cond == nil || cond.Message != msg {
				r.event(am, corev1.EventTypeWarning, reason, "%s", msg)
			}
			setReady(am, metav1.ConditionFalse, reason, msg)
			if reason == SizeNotAvailableReason {
				return ctrl.Result{RequeueAfter: restrictionRecheck}, nil
			}
			return ctrl.Result{}, nil
		}
	}
	avSetID := ""
	if avSet != "" {
		most, err := svc.SKUs.MaxFaultDomains(ctx, ac.Spec.Location)
		if err != nil {
			return r.azureError(am, "reading the location's fault domains", err)
		}
		err = svc.AvSets.Reconcile(ctx, availabilitysets.Spec{ResourceGroup: n.rg, Name: avSet, Location: ac.Spec.Location, FaultDomains: most,
			Tags: tags.Build(owner, "availability-set/"+avSetGroup, ac.Spec.AdditionalTags)})
		if nerr := (*tags.NotOwnedError)(nil); errors.As(err, &nerr) {
			setReady(am, metav1.ConditionFalse, ResourceNotOwnedReason, err.Error())
			return ctrl.Result{}, nil
		}
		if err != nil {
			return r.azureError(am, "availability set", err)
		}
		avSetID = armID(ac.Spec.SubscriptionID, n.rg, "Microsoft.Compute", "availabilitySets", avSet)
	}

	owned := tags.Build(owner, role, mergeMaps(ac.Spec.AdditionalTags, am.Spec.AdditionalTags))
	subnet := n.nodeSubnet
	if isCP {
		subnet = n.cpSubnet
	}
	lb := loadbalancers.Spec{ResourceGroup: n.rg, Name: n.lb, SubscriptionID: ac.Spec.SubscriptionID}
	nic := networkinterfaces.Spec{
		ResourceGroup: n.rg, Name: vmName + "-nic", Location: ac.Spec.Location, Tags: owned,
		SubnetID: armID(ac.Spec.SubscriptionID, n.vnetRG, "Microsoft.Network", "virtualNetworks", n.vnet, "subnets", subnet.Name),
		// Unset follows the size, as CAPZ (networkinterfaces/spec.go @69ec3a40).
		Accelerated: ptr.Deref(am.Spec.AcceleratedNetworking, size.AcceleratedNetworking), IPForwarding: am.Spec.EnableIPForwarding,
	}
	if isCP {
		// SSH to control-plane VMs goes through a NAT rule of the API load
		// balancer; they are the jump hosts to the other nodes.
		natStep := step{"inboundnatrules", vmName}
		tok := token(am.Status.LongRunningOperationStates, natStep, "PUT")
		// The load balancer is read, not its rules listed: its tags say
		// whose it is, and its rules come with it. A rule and a backend
		// pool carry no tags of their own, so without this a machine
		// whose Cluster was pointed at another AzureCluster (one naming
		// another team's group and load balancer) would add its NAT rule
		// to that team's API load balancer and its NIC to the pool behind
		// that team's API server.
		lbObj, err := svc.LBs.Get(ctx, n.rg, n.lb)
		if err != nil {
			return r.azureError(am, "reading the API load balancer", err)
		}
		if lbObj == nil {
			return r.provisioning(ctx, am, "waiting for the API load balancer "+n.lb)
		}
		if !owner.Owns(lbObj.Tags) {
			setReady(am, metav1.ConditionFalse, ResourceNotOwnedReason, fmt.Sprintf("load balancer %s in resource group %s is not cluster %s's (namespace %s): winkube adds no NAT rule or NIC to it", n.lb, n.rg, owner.Cluster, owner.Namespace))
			// Tags fixed by hand wake nothing here: look again later.
			return ctrl.Result{RequeueAfter: time.Minute}, nil
		}
		used := inboundnatrules.PortsOf(lbObj)
		port, ok := used[strings.ToLower(vmName)]
		if !ok {
			if port, err = inboundnatrules.FreePort(used); err != nil {
				return r.azureError(am, "NAT rule", err)
			}
		}
		next, done, err := svc.NatRules.Reconcile(ctx, inboundnatrules.Spec{ResourceGroup: n.rg, LoadBalancer: n.lb, Name: vmName, FrontendID: lb.FrontendID(), Port: port}, tok)
		record(&am.Status.LongRunningOperationStates, natStep, n.rg, "PUT", next)
		if err != nil {
			return r.azureError(am, "NAT rule", err)
		}
		if !done {
			return r.provisioning(ctx, am, "creating the SSH NAT rule")
		}
		am.Status.SSHNATPort = port
		nic.BackendPoolIDs = []string{lb.BackendPoolID()}
		nic.NatRuleIDs = []string{lb.ID() + "/inboundNatRules/" + vmName}
	}
	nicStep := step{"networkinterfaces", nic.Name}
	nicObj, next, done, err := svc.NICs.ReconcileRead(ctx, nic, token(am.Status.LongRunningOperationStates, nicStep, "PUT"))
	record(&am.Status.LongRunningOperationStates, nicStep, n.rg, "PUT", next)
	if err != nil {
		return r.azureError(am, "NIC", err)
	}
	if !done {
		return r.provisioning(ctx, am, "creating the NIC")
	}

	var customData []byte
	if existing == nil && vmToken == "" {
		// The bootstrap data goes into the VM's creation and nowhere else
		// (a VM whose creation failed is sent again without it): it is read
		// then, as CAPZ reads it only to build a new VM's OS profile
		// (azure/services/virtualmachines/virtualmachines.go Reconcile and
		// generateOSProfile @02ca6c38), not on every reconcile of a
		// machine whose VM exists.
		var ok bool
		if customData, ok, err = r.bootstrapData(ctx, am, machine); !ok || err != nil {
			return ctrl.Result{}, err
		}
	}
	spec, err := vmSpec(am, ac.Spec, n.rg, vmName, nic.Name, machine.Spec.FailureDomain, vmImage(img), customData, owned, avSetID)
	if err != nil {
		setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
		return ctrl.Result{}, nil
	}
	if spec.Windows {
		// Random, sent once at creation, never logged or stored: access is
		// by SSH key (from the bootstrap data's users).
		if spec.AdminPassword, err = randomPassword(); err != nil {
			return ctrl.Result{}, err
		}
	}
	// The VM read above (or, while its PUT is under way, the operation)
	// stands for the one the reconcile would read again.
	vm, next, err := svc.VMs.ReconcileFrom(ctx, spec, vmToken, existing)
	record(&am.Status.LongRunningOperationStates, vmStep, n.rg, "PUT", next)
	if errors.Is(err, virtualmachines.ErrVanished) {
		return r.vanished(am, vmName)
	}
	var failed *virtualmachines.ProvisioningFailedError
	if errors.As(err, &failed) {
		return r.vmFailed(am, vmName, failed)
	}
	if err != nil {
		return r.azureError(am, "VM", err)
	}
	if vm == nil {
		am.Status.VMState = "Creating"
		if cond := conditions.Get(am, ReadyCondition); cond != nil && cond.Reason == VMFailedReason {
			// A failed creation sent again: the failure stays in view
			// until the VM is made.
			return ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
		}
		return r.provisioning(ctx, am, "creating the VM")
	}
	am.Status.VMState = ptr.Deref(vm.Properties.ProvisioningState, "")
	if am.Spec.ProviderID == "" {
		r.event(am, corev1.EventTypeNormal, "VMCreated", "VM %s created", vmName)
	}
	// As cloud-provider-azure writes node.spec.providerID (resource group
	// in lower case): a machine written before winkube did is rewritten,
	// which the webhook allows for this change alone, and Cluster API
	// copies it to the Machine on its next reconcile.
	am.Spec.ProviderID = providerid.FromARMID(ptr.Deref(vm.ID, ""))
	if nicObj == nil {
		// Made by this reconcile's PUT, or the last one's: read it for
		// its address.
		nicObj, err = svc.NICs.Get(ctx, n.rg, nic.Name)
		if err == nil && nicObj == nil {
			err = fmt.Errorf("NIC %s is gone", nic.Name)
		}
		if err != nil {
			return r.azureError(am, "reading the NIC", err)
		}
	}
	am.Status.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: vmName},
		{Type: clusterv1.MachineInternalIP, Address: networkinterfaces.PrivateIP(nicObj)},
	}
	am.Status.FailureDomain = machine.Spec.FailureDomain
	if am.Spec.Identity == infrav1.VMIdentitySystemAssigned {
		// The cloud provider on the node acts as this identity: the
		// machine is not done until the identity may.
		g, err := grantRole(ctx, svc, &am.Status.CreatedResources, &am.Spec.AzureVMSpec, ac.Spec.SubscriptionID, n.rg, virtualmachines.PrincipalID(vm), r.RoleAssignmentScopes, groupOwner(owner, ac))
		if err != nil {
			return r.azureError(am, "role assignment", err)
		}
		if !g.done {
			if cond := conditions.Get(am, ReadyCondition); (g.reason == RoleAssignmentFailedReason || g.reason == ResourceNotOwnedReason) && (cond == nil || cond.Message != g.msg) {
				r.event(am, corev1.EventTypeWarning, g.reason, "%s", g.msg)
			}
			setReady(am, metav1.ConditionFalse, g.reason, g.msg)
			return ctrl.Result{RequeueAfter: g.after}, nil
		}
	}
	am.Status.Initialization.Provisioned = ptr.To(true)
	setReady(am, metav1.ConditionTrue, ProvisionedReason, "")
	return r.boot.observe(ctx, machineBootstrap{obj: am, uid: am.UID, nodeRef: hasNode(machine), timeout: r.BootstrapTimeout,
		target: machinelogs.Target{ResourceGroup: n.rg, VM: vmName, Windows: spec.Windows}, logs: svc.BootLogs, futures: &am.Status.LongRunningOperationStates,
		recorder: func(typ, reason, msg string) { r.event(am, typ, reason, "%s", msg) }}), nil
}

// bootstrapData reads the Machine's bootstrap data; ok is false when the
// reconcile stops here (a condition or err says why).
func (r *AzureMachineReconciler) bootstrapData(ctx context.Context, am *infrav1.AzureMachine, machine *clusterv1.Machine) (data []byte, ok bool, err error) {
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: am.Namespace, Name: *machine.Spec.Bootstrap.DataSecretName}, secret); err != nil {
		return nil, false, fmt.Errorf("reading the bootstrap data: %w", err)
	}
	data, ok = secret.Data["value"]
	if !ok {
		setReady(am, metav1.ConditionFalse, WaitingForBootstrapDataReason, "the bootstrap data secret has no key \"value\"")
	}
	return data, ok, nil
}

// vmSpec is the VM a machine asks Azure for, from its spec and what the
// reconcile chose (image, NIC, zone or availability set), without calling
// anything: CAPZ builds its VM spec likewise as a plain value
// (azure/scope/machine.go VMSpec @69ec3a40). A Windows VM's admin password
// is the caller's (random, never stored); err says what in the spec to fix.
func vmSpec(am *infrav1.AzureMachine, cluster infrav1.AzureClusterSpec, rg, vmName, nicName, zone string, img virtualmachines.Image, customData []byte, tags map[string]*string, avSetID string) (virtualmachines.Spec, error) {
	spec := virtualmachines.Spec{
		ResourceGroup: rg, Name: vmName, Location: cluster.Location, Size: am.Spec.VMSize,
		Windows: am.Spec.OS() == infrav1.Windows, ComputerName: vmName, Image: img,
		OSDiskSizeGB: ptr.Deref(am.Spec.OSDisk.DiskSizeGB, 128), CustomData: customData, AdminUsername: AdminUsername,
		NICID: armID(cluster.SubscriptionID, rg, "Microsoft.Network", "networkInterfaces", nicName),
		Zone:  zone, Tags: tags, AvailabilitySetID: avSetID,
	}
	if md := am.Spec.OSDisk.ManagedDisk; md != nil {
		spec.StorageAccountType = md.StorageAccountType
	}
	spec.Caching = am.Spec.OSDisk.CachingType
	if !spec.Windows {
		key, err := base64.StdEncoding.DecodeString(am.Spec.SSHPublicKey)
		if err != nil || len(key) == 0 {
			return spec, errors.New("spec.sshPublicKey is not a base64-encoded OpenSSH key")
		}
		spec.SSHPublicKey = strings.TrimSpace(string(key))
	}
	spec.Identity, spec.UserAssigned = vmIdentity(&am.Spec.AzureVMSpec)
	spec.Made = am.Spec.ProviderID != ""
	return spec, nil
}

// vmFailed reports a VM that Azure reports Failed. Only a failure that
// sending the VM again cannot fix is terminal (the Machine must change);
// otherwise the machine is reconciled again: a VM whose creation failed is
// sent again, and one that ran is Ready again once Azure reports it
// Succeeded, which the next successful operation on it does. CAPZ leaves
// an existing VM alone whatever its state (virtualmachines/spec.go
// @69ec3a40) and requeues an AzureMachinePoolMachine that is not Ready
// every 30 s (exp/controllers/azuremachinepoolmachine_controller.go).
func (r *AzureMachineReconciler) vmFailed(am *infrav1.AzureMachine, vmName string, failed *virtualmachines.ProvisioningFailedError) (ctrl.Result, error) {
	am.Status.VMState = "Failed"
	recheck := 6 * r.Requeue
	reason, msg := VMFailedReason, ""
	switch {
	case failed.Terminal:
		reason = VMProvisionFailedReason
		msg = fmt.Sprintf("VM %s: %v: change what Azure refuses (the image, its plan), then delete the Machine: its MachineSet or MachinePool makes a new one", vmName, failed)
	case failed.Ran:
		msg = fmt.Sprintf("VM %s is in provisioning state Failed (%v). It may still run; winkube does not write it and checks it every %s: the machine is Ready again once Azure reports it Succeeded, which the next successful operation on it does (the disk driver's retry, or `az vm reapply`)", vmName, failed, recheck)
	default:
		msg = fmt.Sprintf("Azure failed to create VM %s (%v); winkube sends it again every %s until Azure makes it. If it keeps failing, choose another VM size, zone or location, or delete the Machine", vmName, failed, recheck)
	}
	if cond := conditions.Get(am, ReadyCondition); cond == nil || cond.Reason != reason || cond.Message != msg {
		r.event(am, corev1.EventTypeWarning, reason, "%s", msg)
	}
	setReady(am, metav1.ConditionFalse, reason, msg)
	if failed.Terminal {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("VM %s: %w", vmName, failed))
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// provisioning reports a resource being made, to look at again when its
// operation asked.
func (r *AzureMachineReconciler) provisioning(ctx context.Context, am *infrav1.AzureMachine, what string) (ctrl.Result, error) {
	setReady(am, metav1.ConditionFalse, ProvisioningReason, what)
	return ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
}

func (r *AzureMachineReconciler) azureError(am *infrav1.AzureMachine, what string, err error) (ctrl.Result, error) {
	reportAzureError(am, what, err)
	return ctrl.Result{}, fmt.Errorf("%s: %w", what, err)
}

func vmImage(img *infrav1.Image) virtualmachines.Image {
	switch {
	case img.ID != nil:
		return virtualmachines.Image{ID: *img.ID}
	case img.ComputeGallery != nil:
		g := img.ComputeGallery
		var out virtualmachines.Image
		if g.Plan != nil {
			out.PlanPublisher, out.PlanProduct, out.PlanName = g.Plan.Publisher, g.Plan.Offer, g.Plan.SKU
		}
		if g.SubscriptionID != nil && g.ResourceGroup != nil {
			out.ID = armID(*g.SubscriptionID, *g.ResourceGroup, "Microsoft.Compute", "galleries", g.Gallery, "images", g.Name, "versions", g.Version)
		} else {
			out.CommunityGalleryImageID = fmt.Sprintf("/CommunityGalleries/%s/Images/%s/Versions/%s", g.Gallery, g.Name, g.Version)
		}
		return out
	default:
		m := img.Marketplace
		return virtualmachines.Image{Publisher: m.Publisher, Offer: m.Offer, SKU: m.SKU, Version: m.Version, ThirdParty: m.ThirdPartyImage}
	}
}

// mergeMaps is a's entries and b's, b's where both have a key: the
// cluster's tags under a machine's, a Secret's labels under ours.
func mergeMaps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// randomPassword makes a Windows admin password meeting Azure's complexity
// rules (upper, lower, digit, symbol; 12 to 123 characters).
func randomPassword() (string, error) {
	const (
		upper  = "ABCDEFGHJKLMNPQRSTUVWXYZ"
		lower  = "abcdefghijkmnopqrstuvwxyz"
		digits = "23456789"
		symbol = "!@#%^*-_+="
	)
	all := upper + lower + digits + symbol
	pick := func(set string) (byte, error) {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(set))))
		if err != nil {
			return 0, err
		}
		return set[n.Int64()], nil
	}
	out := make([]byte, 0, 24)
	for _, set := range []string{upper, lower, digits, symbol} {
		c, err := pick(set)
		if err != nil {
			return "", err
		}
		out = append(out, c)
	}
	for len(out) < 24 {
		c, err := pick(all)
		if err != nil {
			return "", err
		}
		out = append(out, c)
	}
	return string(out), nil
}

// machineResources are the ARM IDs of what a machine creates, in the order
// it creates them.
func machineResources(sub, rg, lb, vmName string, controlPlane bool) (natRule, nic, vm, disk string) {
	if controlPlane {
		natRule = armID(sub, rg, "Microsoft.Network", "loadBalancers", lb, "inboundNatRules", vmName)
	}
	return natRule,
		armID(sub, rg, "Microsoft.Network", "networkInterfaces", vmName+"-nic"),
		armID(sub, rg, "Microsoft.Compute", "virtualMachines", vmName),
		armID(sub, rg, "Microsoft.Compute", "disks", virtualmachines.OSDiskName(vmName))
}

// claimResources records in status.createdResources what the machine is
// about to create, before it creates it, after checking that none of it is
// someone else's. ok is false when the reconcile must stop here: either
// something was refused (a condition says what), or new records must be
// saved first (requeued).
func (r *AzureMachineReconciler) claimResources(ctx context.Context, svc *cloud.Services, am *infrav1.AzureMachine, sub string, n clusterNames, vmName string, controlPlane bool, avSet string) (ctrl.Result, bool, error) {
	natRule, nicID, vmID, diskID := machineResources(sub, n.rg, n.lb, vmName, controlPlane)
	role := machineRole(am)
	added := false
	if !isClaimed(am.Status.CreatedResources, nicID) {
		nic, err := svc.NICs.Get(ctx, n.rg, vmName+"-nic")
		if err != nil {
			res, err := r.azureError(am, "reading NIC", err)
			return res, false, err
		}
		if nic != nil && ptr.Deref(nic.Tags[tags.RoleKey], "") != role {
			setReady(am, metav1.ConditionFalse, ResourceNotOwnedReason, fmt.Sprintf("NIC %s-nic already exists and is not this machine's (role %q): winkube leaves it alone; rename this machine", vmName, ptr.Deref(nic.Tags[tags.RoleKey], "")))
			return ctrl.Result{}, false, nil
		}
		added = claim(&am.Status.CreatedResources, nicID) || added
	}
	if !isClaimed(am.Status.CreatedResources, diskID) {
		disk, err := svc.Disks.Get(ctx, n.rg, virtualmachines.OSDiskName(vmName))
		if err != nil {
			res, err := r.azureError(am, "reading OS disk", err)
			return res, false, err
		}
		// An OS disk has no tags of its own: it is this machine's while
		// attached to this machine's VM (checked above).
		if disk != nil && !strings.EqualFold(ptr.Deref(disk.ManagedBy, ""), vmID) {
			setReady(am, metav1.ConditionFalse, ResourceNotOwnedReason, fmt.Sprintf("disk %s already exists and is not this machine's OS disk: winkube leaves it alone; rename this machine or remove the disk", virtualmachines.OSDiskName(vmName)))
			return ctrl.Result{}, false, nil
		}
		added = claim(&am.Status.CreatedResources, diskID) || added
	}
	// The VM was checked by the caller; the NAT rule is a child of the
	// cluster's own load balancer, named after this machine's VM.
	added = claim(&am.Status.CreatedResources, vmID) || added
	if natRule != "" {
		added = claim(&am.Status.CreatedResources, natRule) || added
	}
	if avSet != "" {
		// Shared by the group's machines: whichever goes last deletes it
		// (availabilitysets.DeleteIfEmpty).
		added = claim(&am.Status.CreatedResources, armID(sub, n.rg, "Microsoft.Compute", "availabilitySets", avSet)) || added
	}
	if added {
		return ctrl.Result{RequeueAfter: persisted}, false, nil
	}
	return ctrl.Result{}, true, nil
}

// dropForeignClaims forgets the records of a VM name that turned out to be
// another machine's (its VM, OS disk and NAT rule, and the NIC unless it is
// tagged as this machine's): they must not be deleted with this machine.
func (r *AzureMachineReconciler) dropForeignClaims(ctx context.Context, svc *cloud.Services, am *infrav1.AzureMachine, rg, vmName string) {
	for _, id := range append([]string(nil), am.Status.CreatedResources...) {
		k, rid, err := kindOf(id)
		if err != nil || !strings.EqualFold(rid.ResourceGroupName, rg) {
			continue
		}
		switch strings.ToLower(k) {
		case "virtualmachines", "loadbalancers/inboundnatrules":
			if strings.EqualFold(rid.Name, vmName) {
				unclaim(&am.Status.CreatedResources, id)
			}
		case "disks":
			if strings.EqualFold(rid.Name, virtualmachines.OSDiskName(vmName)) {
				unclaim(&am.Status.CreatedResources, id)
			}
		case "networkinterfaces":
			if nic, err := svc.NICs.Get(ctx, rg, rid.Name); err == nil && nic != nil && ptr.Deref(nic.Tags[tags.RoleKey], "") != machineRole(am) {
				unclaim(&am.Status.CreatedResources, id)
			}
		}
	}
}

// reconcileDelete deletes exactly what the machine recorded, VM first.
// Tagged resources are deleted only while tagged as this machine's.
func (r *AzureMachineReconciler) reconcileDelete(ctx context.Context, am *infrav1.AzureMachine) (ctrl.Result, error) {
	setReady(am, metav1.ConditionFalse, DeletingReason, "deleting the VM, its OS disk, NIC and NAT rule")
	if len(am.Status.CreatedResources) == 0 {
		// Every resource is recorded before it is created: none was.
		controllerutil.RemoveFinalizer(am, infrav1.MachineFinalizer)
		return ctrl.Result{}, nil
	}
	sub, err := subscriptionOf(am.Status.CreatedResources)
	if err != nil {
		return ctrl.Result{}, blocked(am, "the recorded resources", err)
	}
	svc, err := r.Identities.ServicesFor(ctx, am, sub)
	if err != nil {
		return ctrl.Result{}, blocked(am, "the recorded resources (Azure credentials)", err)
	}
	r.dropForeignTokens(am, svc)
	owner, err := ownerOf(ctx, r.Client, am.Labels[clusterv1.ClusterNameLabel], am.Namespace)
	if err != nil {
		return ctrl.Result{}, readBlocked(am, true, "the AzureClusters", err)
	}
	p := &proof{owner: owner, role: machineRole(am), kinds: []string{
		"virtualmachines", "disks", "networkinterfaces", "loadbalancers/inboundnatrules", "availabilitysets", "roleassignments"}}
	forget := func(err error) { r.event(am, corev1.EventTypeWarning, RecordDroppedReason, "%v", err) }
	var actions []action
	for _, id := range sortForDeletion(am.Status.CreatedResources) {
		if s := stepOf(id); s.service == "virtualmachines" {
			actions = append(actions, action{osDiskStep(s.name), func(tok string) (string, bool, error) {
				return deleteOSDiskWithVM(ctx, svc, p, am.Status.CreatedResources, id, tok)
			}})
		}
		actions = append(actions, action{stepOf(id), func(tok string) (string, bool, error) {
			if k, rid, err := kindOf(id); err == nil && strings.EqualFold(k, "availabilitySets") {
				// The group's set: deleted by the last of its machines.
				done, err := svc.AvSets.DeleteIfEmpty(ctx, rid.ResourceGroupName, rid.Name, owner)
				if done {
					unclaim(&am.Status.CreatedResources, id)
				}
				return "", done, err
			}
			return deleteProven(ctx, svc, p, &am.Status.CreatedResources, id, tok, forget)
		}})
	}
	pending, failed, err := runActions(&am.Status.LongRunningOperationStates, "", "DELETE", actions)
	if err != nil {
		return ctrl.Result{}, blocked(am, failed.service+" "+failed.name, err)
	}
	if pending != nil {
		setReady(am, metav1.ConditionFalse, DeletingReason, fmt.Sprintf("deleting %s %s", pending.service, pending.name))
		return ctrl.Result{RequeueAfter: operationRequeue(ctx, r.Requeue)}, nil
	}
	r.event(am, corev1.EventTypeNormal, "Deleted", "deleted the VM, its OS disk, NIC and NAT rule")
	controllerutil.RemoveFinalizer(am, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}

// dropForeignTokens forgets recorded operations that would poll another
// host than the ARM endpoint.
func (r *AzureMachineReconciler) dropForeignTokens(am *infrav1.AzureMachine, svc *cloud.Services) {
	if dropped := dropForeignTokens(am, svc); len(dropped) > 0 {
		r.event(am, corev1.EventTypeWarning, ForeignOperationReason,
			"dropped the recorded operations %v: they would poll another host than the ARM endpoint %s; winkube starts them again", dropped, svc.ResourceManager)
	}
}

func (r *AzureMachineReconciler) event(am *infrav1.AzureMachine, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(am, typ, reason, format, args...)
	}
}

// deletionInterrupted fails a machine that is not being deleted but whose
// records hold the VM's delete under way: its deletion began, and the
// object was then made again without it. clusterctl move does that: it
// creates each object in the target without its deletionTimestamp. Azure
// finishes the delete regardless, so the machine fails at once instead of
// waiting to find its VM gone; deleting it resumes that same operation.
func (r *AzureMachineReconciler) deletionInterrupted(am *infrav1.AzureMachine, vmName string) (ctrl.Result, error) {
	am.Status.VMState = "Deleting"
	setReady(am, metav1.ConditionFalse, VMDeletedReason, fmt.Sprintf("VM %s was being deleted when this machine was moved or re-created without its deletion (clusterctl move does not carry one); Azure is deleting it: delete the Machine again to finish", vmName))
	r.event(am, corev1.EventTypeWarning, VMDeletedReason, "VM %s was being deleted before this machine was moved or re-created", vmName)
	return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("VM %s was being deleted when machine %s was re-created", vmName, am.Name))
}

// vanished fails a machine whose VM was made and is gone: deleted outside
// winkube. Making it again would boot it with bootstrap data whose join
// token has usually expired, and report a machine Ready that never joins.
// The machine fails instead, and a MachineHealthCheck replaces it (CAPZ
// does the same).
func (r *AzureMachineReconciler) vanished(am *infrav1.AzureMachine, vmName string) (ctrl.Result, error) {
	am.Status.VMState = "Deleted"
	setReady(am, metav1.ConditionFalse, VMDeletedReason, fmt.Sprintf("VM %s was deleted outside winkube; this machine will not make it again: delete the Machine (a MachineHealthCheck does) to replace it", vmName))
	r.event(am, corev1.EventTypeWarning, VMDeletedReason, "VM %s was deleted outside winkube", vmName)
	return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("VM %s of machine %s was deleted outside winkube", vmName, am.Name))
}
