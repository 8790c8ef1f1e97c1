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
