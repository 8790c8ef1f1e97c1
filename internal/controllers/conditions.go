package controllers

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Condition types and reasons winkube's objects report; Ready sums them up
// and is what Cluster API mirrors.
const (
	ReadyCondition = "Ready"
	// CloudProviderCredentialsCondition says whether the cloud provider on
	// a machine's node has credentials Azure would accept: false for a
	// managed-identity azure.json on a VM without an identity.
	CloudProviderCredentialsCondition = "CloudProviderCredentials"

	// Reasons.
	ProvisionedReason             = "Provisioned"
	ProvisioningReason            = "Provisioning"
	DeletingReason                = "Deleting"
	WaitingForClusterInfraReason  = "WaitingForClusterInfrastructure"
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// VMProvisionFailedReason: Azure refused the VM for what only a change
	// of the Machine fixes; the machine is failed for good.
	VMProvisionFailedReason = "VMProvisionFailed"
	// VMFailedReason: Azure reports the VM Failed (its creation, or an
	// operation on it after it ran, failed); winkube sends a failed
	// creation again and waits for a VM that ran to be Succeeded again.
	VMFailedReason       = "VMFailed"
	VMNameConflictReason = "VMNameConflict"
	// VMDeletedReason: the machine's VM was deleted outside winkube; the
	// machine is failed for good and waits to be replaced.
	VMDeletedReason            = "VMDeleted"
	InvalidConfigurationReason = "InvalidConfiguration"
	AzureErrorReason           = "AzureError"
	// DeletionBlockedReason: deletion waits (finalizer kept) on an error
	// other than NotFound; the message says which resource and why.
	DeletionBlockedReason = "DeletionBlocked"
	// ResourceNotOwnedReason: a resource winkube would create exists and is
	// not winkube's; it is left as it is.
	ResourceNotOwnedReason = "ResourceNotOwned"
	// RecordDroppedReason (an Event): a recorded resource that Azure does
	// not show as the object's was forgotten, not deleted.
	RecordDroppedReason = "RecordDropped"
	// ForeignOperationReason (an Event): a recorded operation that would
	// poll another host than the ARM endpoint was dropped.
	ForeignOperationReason = "ForeignOperationDropped"
)

// persisted continues a reconcile once what it just recorded (a finalizer,
// a resource about to be created) is written: the deferred patch writes it,
// then the request comes back at once.
const persisted = time.Millisecond

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
