package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// Condition types and reasons: they live in api/v1alpha1 (see there); the
// names stay here for the package's callers.
const (
	ReadyCondition                    = infrav1.ReadyCondition
	CloudProviderCredentialsCondition = infrav1.CloudProviderCredentialsCondition
	ProvisionedReason                 = infrav1.ProvisionedReason
	ProvisioningReason                = infrav1.ProvisioningReason
	DeletingReason                    = infrav1.DeletingReason
	WaitingForClusterInfraReason      = infrav1.WaitingForClusterInfraReason
	WaitingForBootstrapDataReason     = infrav1.WaitingForBootstrapDataReason
	VMProvisionFailedReason           = infrav1.VMProvisionFailedReason
	VMFailedReason                    = infrav1.VMFailedReason
	VMNameConflictReason              = infrav1.VMNameConflictReason
	VMDeletedReason                   = infrav1.VMDeletedReason
	InvalidConfigurationReason        = infrav1.InvalidConfigurationReason
	AzureErrorReason                  = infrav1.AzureErrorReason
	DeletionBlockedReason             = infrav1.DeletionBlockedReason
	ResourceNotOwnedReason            = infrav1.ResourceNotOwnedReason
	RecordDroppedReason               = infrav1.RecordDroppedReason
	ForeignOperationReason            = infrav1.ForeignOperationReason
)

// persisted ends a reconcile that just recorded something (a finalizer, a
// resource about to be created): the deferred patch writes it, and the
// write's own watch event brings the request back, to a cache that holds
// the write. A requeue at once (it was 1 ms) ran the next reconcile on the
// cache as it was before the write: it recorded the same thing again, and
// its optimistically locked conditions patch was refused as a conflict and
// sent again, two to three patches (and as many reads of the VM and NIC in
// Azure) for each change. Cluster API ends a reconcile that added its
// finalizer the same way, with no requeue (util/finalizers EnsureFinalizer,
// cluster-api v1.14.2). What is recorded this way is metadata (the
// finalizer; the records, mirrored in annotations), which wakes the object
// whatever the controller's filter on its own status writes
// (azureMachineChanged).
const persisted time.Duration = 0

func setReady(obj conditions.Setter, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(obj, metav1.Condition{Type: ReadyCondition, Status: status, Reason: reason, Message: message})
}

// patchOnReturn writes an object's changes (status, conditions, finalizers
// and the spec fields the contract has the provider set) when a reconcile
// returns, whichever way it returns; an object already gone is no error.
func patchOnReturn(ctx context.Context, helper *patch.Helper, obj client.Object, reterr *error) {
	saveRecords(obj)
	if err := helper.Patch(ctx, obj, patch.WithOwnedConditions{Conditions: []string{ReadyCondition, CloudProviderCredentialsCondition}}); err != nil && !apierrors.IsNotFound(err) {
		*reterr = errors.Join(*reterr, err)
	}
}

// azureClusterRecheck is how soon a machine whose AzureCluster is not
// provisioned looks again: nothing about the AzureCluster wakes it.
const azureClusterRecheck = 5 * time.Second

// waitForAzureCluster holds a machine or pool until the AzureCluster its
// Cluster names now is provisioned itself. The Cluster's
// InfrastructureProvisioned is not enough: Cluster API keeps it once set
// and lets the Cluster's infrastructureRef be pointed at another
// AzureCluster, and one that its own reconcile refused (another team's
// resource group, network or load balancer) must not have machines built
// from its spec.
func waitForAzureCluster(obj conditions.Setter, ac *infrav1.AzureCluster) *ctrl.Result {
	if ptr.Deref(ac.Status.Initialization.Provisioned, false) {
		return nil
	}
	setReady(obj, metav1.ConditionFalse, WaitingForClusterInfraReason, fmt.Sprintf("waiting for AzureCluster %s, which the Cluster names, to be provisioned", ac.Name))
	return &ctrl.Result{RequeueAfter: azureClusterRecheck}
}
