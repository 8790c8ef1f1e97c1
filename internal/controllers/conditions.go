package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
)

// Condition types and reasons winkube's objects report; Ready sums them up
// and is what Cluster API mirrors.
const (
	ReadyCondition = "Ready"

	// Reasons.
	ProvisionedReason             = "Provisioned"
	ProvisioningReason            = "Provisioning"
	DeletingReason                = "Deleting"
	WaitingForClusterInfraReason  = "WaitingForClusterInfrastructure"
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	VMProvisionFailedReason       = "VMProvisionFailed"
	VMNameConflictReason          = "VMNameConflict"
	InvalidConfigurationReason    = "InvalidConfiguration"
	AzureErrorReason              = "AzureError"
)

func setReady(obj conditions.Setter, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(obj, metav1.Condition{Type: ReadyCondition, Status: status, Reason: reason, Message: message})
}
