package webhooks

import (
	"context"
	"fmt"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// SetupWithManager registers every winkube webhook with the manager's
// webhook server. Checks that read other objects use the manager's API
// reader, not its cache, but for the AzureMachine name check, which reads
// an index of the cache.
func SetupWithManager(mgr ctrl.Manager) error {
	r := mgr.GetAPIReader()
	records := &Records{Config: mgr.GetConfig()}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrav1.AzureMachine{}, VMNameIndex, IndexVMName); err != nil {
		return fmt.Errorf("indexing AzureMachines by VM name: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureCluster{}).
		WithDefaulter(&AzureCluster{Reader: r}).WithValidator(&AzureCluster{Reader: r, Records: records}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureClusterIdentity{}).
		WithValidator(AzureClusterIdentity{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureClusterTemplate{}).
		WithValidator(AzureClusterTemplate{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureMachine{}).
		WithDefaulter(&AzureMachine{Reader: r}).WithValidator(&AzureMachine{Reader: r, Machines: mgr.GetCache(), Records: records}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureMachineTemplate{}).
		WithDefaulter(AzureMachineTemplate{}).WithValidator(AzureMachineTemplate{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureMachinePool{}).
		WithDefaulter(&AzureMachinePool{Reader: r}).WithValidator(&AzureMachinePool{Reader: r, Records: records}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.AzureMachinePoolMachine{}).
		WithValidator(AzureMachinePoolMachine{Records: records}).Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &clusterv1.Cluster{}).
		WithValidator(&Cluster{Reader: r}).
		WithValidatorCustomPath("/validate-winkube-cluster-x-k8s-io-v1beta2-cluster").Complete()
}
