package controllers

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
)

// AzureMachinePoolMachineReconciler mirrors one scale-set instance into its
// AzureMachinePoolMachine and deletes the instance when the object goes.
type AzureMachinePoolMachineReconciler struct {
	Client  client.Client
	Cloud   *cloud.Cloud
	Requeue time.Duration
}

// SetupWithManager registers the controller.
func (r *AzureMachinePoolMachineReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.AzureMachinePoolMachine{}).WithOptions(opts).Named("azuremachinepoolmachine").Complete(r)
}

// Reconcile mirrors or deletes one instance.
func (r *AzureMachinePoolMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	m := &infrav1.AzureMachinePoolMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper, err := patch.NewHelper(m, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer patchOnReturn(ctx, helper, m, &reterr)
	pool := &infrav1.AzureMachinePool{}
	poolErr := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Labels[infrav1.MachinePoolNameLabel]}, pool)
	var svc *cloud.Services
	var n clusterNames
	if poolErr == nil {
		if cluster, err := util.GetClusterFromMetadata(ctx, r.Client, m.ObjectMeta); err == nil {
			ac := &infrav1.AzureCluster{}
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: cluster.Spec.InfrastructureRef.Name}, ac); err == nil {
				if svc, err = r.Cloud.For(ac.Spec.SubscriptionID); err != nil {
					return ctrl.Result{}, err
				}
				n, _ = namesOf(ac, cluster.Name)
			}
		}
	}
	if !m.DeletionTimestamp.IsZero() {
		setReady(m, metav1.ConditionFalse, DeletingReason, "deleting the scale-set instance")
		if svc != nil && n.rg != "" && pool.DeletionTimestamp.IsZero() {
			s := step{"scalesetvms", m.Spec.InstanceID}
			next, done, err := svc.ScaleSets.DeleteInstance(ctx, n.rg, pool.Name, m.Spec.InstanceID, token(m.Status.LongRunningOperationStates, s))
			record(&m.Status.LongRunningOperationStates, s, n.rg, "DELETE", next)
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("deleting instance %s: %w", m.Spec.InstanceID, err)
			}
			if !done {
				return ctrl.Result{RequeueAfter: r.Requeue}, nil
			}
		}
		controllerutil.RemoveFinalizer(m, infrav1.MachinePoolMachineFinalizer)
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(m, infrav1.MachinePoolMachineFinalizer) {
		return ctrl.Result{Requeue: true}, nil
	}
	if svc == nil || n.rg == "" {
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	instances, err := svc.ScaleSets.Instances(ctx, n.rg, pool.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, in := range instances {
		if in.InstanceID != m.Spec.InstanceID {
			continue
		}
		m.Status.ComputerName = in.ComputerName
		m.Status.ProvisioningState = in.ProvisioningState
		m.Status.LatestModelApplied = in.LatestModelApplied
		ips, err := svc.ScaleSets.InstanceIPs(ctx, n.rg, pool.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		m.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: in.ComputerName}}
		if ip := ips[in.InstanceID]; ip != "" {
			m.Status.Addresses = append(m.Status.Addresses, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: ip})
		}
		if in.ProvisioningState == "Succeeded" {
			m.Status.Initialization.Provisioned = ptr.To(true)
			setReady(m, metav1.ConditionTrue, ProvisionedReason, "")
			if !in.LatestModelApplied {
				return ctrl.Result{RequeueAfter: r.Requeue}, nil
			}
			return ctrl.Result{}, nil
		}
		setReady(m, metav1.ConditionFalse, ProvisioningReason, "instance is "+in.ProvisioningState)
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	// The instance is gone (deleted outside winkube): so is this object.
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, m))
}
