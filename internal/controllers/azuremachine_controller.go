package controllers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/inboundnatrules"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
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

// AzureMachineReconciler provisions the VM of a Machine.
type AzureMachineReconciler struct {
	Client  client.Client
	Cloud   *cloud.Cloud
	Requeue time.Duration
}

// SetupWithManager registers the controller.
func (r *AzureMachineReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureMachine{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToAzureMachine)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToObjects(r.Client, func() client.ObjectList { return &infrav1.AzureMachineList{} }))).
		WithOptions(opts).Named("azuremachine").Complete(r)
}

// Reconcile brings one AzureMachine's VM to its spec.
func (r *AzureMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	am := &infrav1.AzureMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, am); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	machine, err := util.GetOwnerMachine(ctx, r.Client, am.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if machine == nil && am.DeletionTimestamp.IsZero() {
		log.FromContext(ctx).Info("waiting for Cluster API to set the owning Machine")
		return ctrl.Result{}, nil
	}
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, am.ObjectMeta)
	if err != nil {
		if am.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, err
		}
		cluster = nil
	}
	if cluster != nil && annotations.IsPaused(cluster, am) {
		return ctrl.Result{}, nil
	}
	ac := &infrav1.AzureCluster{}
	if cluster != nil {
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: am.Namespace, Name: cluster.Spec.InfrastructureRef.Name}, ac); err != nil {
			return ctrl.Result{}, err
		}
	}
	helper, err := patch.NewHelper(am, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer patchOnReturn(ctx, helper, am, &reterr)
	if !am.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, am, ac, machine, cluster)
	}
	return r.reconcileNormal(ctx, am, ac, machine, cluster)
}

func vmNameOf(am *infrav1.AzureMachine) string {
	return naming.VMName(am.Name, am.Spec.OS() == infrav1.Windows)
}

// machineRole tags a VM with the object it belongs to, so that a VM of the
// same name made for another machine is recognised as a conflict.
func machineRole(am *infrav1.AzureMachine) string { return "machine_" + am.Namespace + "_" + am.Name }

func (r *AzureMachineReconciler) reconcileNormal(ctx context.Context, am *infrav1.AzureMachine, ac *infrav1.AzureCluster, machine *clusterv1.Machine, cluster *clusterv1.Cluster) (ctrl.Result, error) {
	if controllerutil.AddFinalizer(am, infrav1.MachineFinalizer) {
		return ctrl.Result{Requeue: true}, nil
	}
	if cluster == nil || !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		setReady(am, metav1.ConditionFalse, WaitingForClusterInfraReason, "waiting for the cluster's infrastructure")
		return ctrl.Result{}, nil
	}
	if machine.Spec.Bootstrap.DataSecretName == nil {
		setReady(am, metav1.ConditionFalse, WaitingForBootstrapDataReason, "waiting for the bootstrap provider's data secret")
		return ctrl.Result{}, nil
	}
	if cond := readyCondition(am); cond != nil && cond.Reason == VMProvisionFailedReason {
		return ctrl.Result{}, nil // terminal: the Machine must be replaced
	}
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: am.Namespace, Name: *machine.Spec.Bootstrap.DataSecretName}, secret); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the bootstrap data: %w", err)
	}
	customData, ok := secret.Data["value"]
	if !ok {
		setReady(am, metav1.ConditionFalse, WaitingForBootstrapDataReason, "the bootstrap data secret has no key \"value\"")
		return ctrl.Result{}, nil
	}
	svc, err := r.Cloud.For(ac.Spec.SubscriptionID)
	if err != nil {
		return ctrl.Result{}, err
	}
	n, err := namesOf(ac, cluster.Name)
	if err != nil {
		setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, err.Error())
		return ctrl.Result{}, nil
	}
	vmName := vmNameOf(am)
	am.Status.VMName = vmName
	role := machineRole(am)

	// Azure would treat a second machine with this VM name as the first one's VM.
	if existing, err := svc.VMs.Get(ctx, n.rg, vmName); err != nil {
		return r.azureError(am, "reading VM", err)
	} else if existing != nil && ptr.Deref(existing.Tags[tags.RoleKey], "") != role {
		setReady(am, metav1.ConditionFalse, VMNameConflictReason, fmt.Sprintf("VM %s already exists and belongs to %s: rename this machine so that its Windows name differs", vmName, ptr.Deref(existing.Tags[tags.RoleKey], "something else")))
		return ctrl.Result{}, nil
	}

	owned := tags.Build(cluster.Name, role, mergeTags(ac.Spec.AdditionalTags, am.Spec.AdditionalTags))
	isCP := util.IsControlPlaneMachine(machine)
	subnet := n.nodeSubnet
	if isCP {
		subnet = n.cpSubnet
	}
	lb := loadbalancers.Spec{ResourceGroup: n.rg, Name: n.lb, SubscriptionID: ac.Spec.SubscriptionID}
	nic := networkinterfaces.Spec{
		ResourceGroup: n.rg, Name: vmName + "-nic", Location: ac.Spec.Location, Tags: owned,
		SubnetID:    "/subscriptions/" + ac.Spec.SubscriptionID + "/resourceGroups/" + n.vnetRG + "/providers/Microsoft.Network/virtualNetworks/" + n.vnet + "/subnets/" + subnet.Name,
		Accelerated: ptr.Deref(am.Spec.AcceleratedNetworking, false),
	}
	if isCP {
		// SSH to control-plane VMs goes through a NAT rule of the API load
		// balancer; they are the jump hosts to the other nodes.
		natStep := step{"inboundnatrules", vmName}
		tok := token(am.Status.LongRunningOperationStates, natStep)
		used, err := svc.NatRules.Ports(ctx, n.rg, n.lb)
		if err != nil {
			return r.azureError(am, "listing NAT rules", err)
		}
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
			return r.provisioning(am, "creating the SSH NAT rule")
		}
		am.Status.SSHNATPort = port
		nic.BackendPoolIDs = []string{lb.BackendPoolID()}
		nic.NatRuleIDs = []string{lb.ID() + "/inboundNatRules/" + vmName}
	}
	nicStep := step{"networkinterfaces", nic.Name}
	next, done, err := svc.NICs.Reconcile(ctx, nic, token(am.Status.LongRunningOperationStates, nicStep))
	record(&am.Status.LongRunningOperationStates, nicStep, n.rg, "PUT", next)
	if err != nil {
		return r.azureError(am, "NIC", err)
	}
	if !done {
		return r.provisioning(am, "creating the NIC")
	}

	img, err := svc.Images.Resolve(ctx, am.Spec.Image, images.Request{
		Location: ac.Spec.Location, KubernetesVersion: machine.Spec.Version, OS: am.Spec.OS(),
		WindowsVersion: am.Spec.WindowsServerVersion, Runtime: am.Spec.ContainerRuntime,
	})
	if err != nil {
		setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, "choosing the image: "+err.Error())
		return ctrl.Result{}, nil
	}
	spec := virtualmachines.Spec{
		ResourceGroup: n.rg, Name: vmName, Location: ac.Spec.Location, Size: am.Spec.VMSize,
		Windows: am.Spec.OS() == infrav1.Windows, ComputerName: vmName, Image: vmImage(img),
		OSDiskSizeGB: ptr.Deref(am.Spec.OSDisk.DiskSizeGB, 128), CustomData: customData, AdminUsername: AdminUsername,
		NICID: "/subscriptions/" + ac.Spec.SubscriptionID + "/resourceGroups/" + n.rg + "/providers/Microsoft.Network/networkInterfaces/" + nic.Name,
		Zone:  machine.Spec.FailureDomain, Tags: owned,
	}
	if md := am.Spec.OSDisk.ManagedDisk; md != nil {
		spec.StorageAccountType = md.StorageAccountType
	}
	spec.Caching = am.Spec.OSDisk.CachingType
	if spec.Windows {
		// Random, sent once at creation, never logged or stored: access is
		// by SSH key (from the bootstrap data's users).
		if spec.AdminPassword, err = randomPassword(); err != nil {
			return ctrl.Result{}, err
		}
	} else {
		key, err := base64.StdEncoding.DecodeString(am.Spec.SSHPublicKey)
		if err != nil || len(key) == 0 {
			setReady(am, metav1.ConditionFalse, InvalidConfigurationReason, "spec.sshPublicKey is not a base64-encoded OpenSSH key")
			return ctrl.Result{}, nil
		}
		spec.SSHPublicKey = strings.TrimSpace(string(key))
	}
	vmStep := step{"virtualmachines", vmName}
	vm, next, err := svc.VMs.Reconcile(ctx, spec, token(am.Status.LongRunningOperationStates, vmStep))
	record(&am.Status.LongRunningOperationStates, vmStep, n.rg, "PUT", next)
	var failed *virtualmachines.ProvisioningFailedError
	if errors.As(err, &failed) {
		am.Status.VMState = "Failed"
		msg := failed.Error()
		if cond := readyCondition(am); failed.Code == "" && cond != nil && cond.Reason == VMProvisionFailedReason {
			msg = cond.Message
		}
		setReady(am, metav1.ConditionFalse, VMProvisionFailedReason, msg)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return r.azureError(am, "VM", err)
	}
	if vm == nil {
		am.Status.VMState = "Creating"
		return r.provisioning(am, "creating the VM")
	}
	am.Status.VMState = ptr.Deref(vm.Properties.ProvisioningState, "")
	am.Spec.ProviderID = "azure://" + ptr.Deref(vm.ID, "")
	nicObj, err := svc.NICs.Get(ctx, n.rg, nic.Name)
	if err != nil || nicObj == nil {
		return r.azureError(am, "reading the NIC", fmt.Errorf("%v", err))
	}
	am.Status.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineHostName, Address: vmName},
		{Type: clusterv1.MachineInternalIP, Address: networkinterfaces.PrivateIP(nicObj)},
	}
	am.Status.FailureDomain = machine.Spec.FailureDomain
	am.Status.Initialization.Provisioned = ptr.To(true)
	setReady(am, metav1.ConditionTrue, ProvisionedReason, "")
	return ctrl.Result{}, nil
}

func (r *AzureMachineReconciler) provisioning(am *infrav1.AzureMachine, what string) (ctrl.Result, error) {
	setReady(am, metav1.ConditionFalse, ProvisioningReason, what)
	return ctrl.Result{RequeueAfter: r.Requeue}, nil
}

func (r *AzureMachineReconciler) azureError(am *infrav1.AzureMachine, what string, err error) (ctrl.Result, error) {
	setReady(am, metav1.ConditionFalse, AzureErrorReason, fmt.Sprintf("%s: %v", what, err))
	return ctrl.Result{}, fmt.Errorf("%s: %w", what, err)
}

func readyCondition(am *infrav1.AzureMachine) *metav1.Condition {
	for i := range am.Status.Conditions {
		if am.Status.Conditions[i].Type == ReadyCondition {
			return &am.Status.Conditions[i]
		}
	}
	return nil
}

func vmImage(img *infrav1.Image) virtualmachines.Image {
	switch {
	case img.ID != nil:
		return virtualmachines.Image{ID: *img.ID}
	case img.ComputeGallery != nil:
		g := img.ComputeGallery
		if g.SubscriptionID != nil && g.ResourceGroup != nil {
			return virtualmachines.Image{ID: fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Compute/galleries/%s/images/%s/versions/%s", *g.SubscriptionID, *g.ResourceGroup, g.Gallery, g.Name, g.Version)}
		}
		return virtualmachines.Image{CommunityGalleryImageID: fmt.Sprintf("/CommunityGalleries/%s/Images/%s/Versions/%s", g.Gallery, g.Name, g.Version)}
	default:
		m := img.Marketplace
		return virtualmachines.Image{Publisher: m.Publisher, Offer: m.Offer, SKU: m.SKU, Version: m.Version}
	}
}

func mergeTags(a, b map[string]string) map[string]string {
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

func (r *AzureMachineReconciler) reconcileDelete(ctx context.Context, am *infrav1.AzureMachine, ac *infrav1.AzureCluster, machine *clusterv1.Machine, cluster *clusterv1.Cluster) (ctrl.Result, error) {
	setReady(am, metav1.ConditionFalse, DeletingReason, "deleting the VM, its OS disk, NIC and NAT rule")
	if cluster == nil || ac.Name == "" {
		// Without the cluster there is no resource group to look in; the
		// cluster's deletion removes the group.
		controllerutil.RemoveFinalizer(am, infrav1.MachineFinalizer)
		return ctrl.Result{}, nil
	}
	svc, err := r.Cloud.For(ac.Spec.SubscriptionID)
	if err != nil {
		return ctrl.Result{}, err
	}
	n, err := namesOf(ac, cluster.Name)
	if err != nil {
		controllerutil.RemoveFinalizer(am, infrav1.MachineFinalizer)
		return ctrl.Result{}, nil
	}
	vmName := vmNameOf(am)
	// A VM of the same name that is not this machine's is left alone.
	if vm, err := svc.VMs.Get(ctx, n.rg, vmName); err != nil {
		return r.azureError(am, "reading VM", err)
	} else if vm != nil && ptr.Deref(vm.Tags[tags.RoleKey], "") != machineRole(am) {
		controllerutil.RemoveFinalizer(am, infrav1.MachineFinalizer)
		return ctrl.Result{}, nil
	}
	actions := []action{
		{step{"virtualmachines", vmName}, func(tok string) (string, bool, error) { return svc.VMs.Delete(ctx, n.rg, vmName, tok) }},
		{step{"disks", virtualmachines.OSDiskName(vmName)}, func(tok string) (string, bool, error) {
			return svc.Disks.Delete(ctx, n.rg, virtualmachines.OSDiskName(vmName), tok)
		}},
		{step{"networkinterfaces", vmName + "-nic"}, func(tok string) (string, bool, error) { return svc.NICs.Delete(ctx, n.rg, vmName+"-nic", tok) }},
	}
	if machine == nil || util.IsControlPlaneMachine(machine) {
		actions = append(actions, action{step{"inboundnatrules", vmName}, func(tok string) (string, bool, error) {
			return svc.NatRules.Delete(ctx, n.rg, n.lb, vmName, tok)
		}})
	}
	pending, failed, err := runActions(&am.Status.LongRunningOperationStates, n.rg, "DELETE", actions)
	if err != nil {
		return r.azureError(am, "deleting "+failed.service+" "+failed.name, err)
	}
	if pending != nil {
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	controllerutil.RemoveFinalizer(am, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}
