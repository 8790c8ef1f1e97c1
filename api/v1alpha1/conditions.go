package v1alpha1

// Condition types and reasons winkube's objects report, in the API package
// as CAPZ keeps them (api/v1beta1/consts.go @69ec3a40), so that a reader of
// the objects (winkube doctor, a user's tooling) needs no controller code.
// Ready sums them up and is what Cluster API mirrors.
const (
	ReadyCondition = "Ready"
	// CloudProviderCredentialsCondition says whether the cloud provider on
	// a machine's node has credentials Azure would accept: false for a
	// managed-identity azure.json on a VM without an identity.
	CloudProviderCredentialsCondition = "CloudProviderCredentials"
	// BootstrapSucceededCondition says whether a provisioned machine's
	// bootstrap (cloud-init or cloudbase-init, then kubeadm) made it a
	// node. CAPZ names its condition and reason alike (api/v1beta1/consts.go
	// BootstrapSucceededCondition, BootstrapFailedReason @69ec3a40).
	BootstrapSucceededCondition = "BootstrapSucceeded"
)

// Reasons of the Ready condition.
const (
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
	// creation again and waits for a VM that ran to be Succeeded again. A
	// pool deletes an instance Azure reports Failed and makes a new one.
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
	// SizeNotAvailableReason: the subscription may not deploy the
	// machine's VM size where the machine is placed (Azure's
	// SkuNotAvailable).
	SizeNotAvailableReason = "SizeNotAvailable"
	// RoleAssignmentFailedReason: the machine's system-assigned identity
	// could not be given its role; the message says what the manager lacks.
	RoleAssignmentFailedReason = "RoleAssignmentFailed"
)

// Reasons of a cluster whose identity cannot be used.
const (
	IdentityNotFoundReason       = "IdentityNotFound"
	NamespaceNotAllowedReason    = "NamespaceNotAllowedByIdentity"
	IdentitySecretNotFoundReason = "IdentitySecretNotFound"
	InvalidIdentityReason        = "InvalidIdentity"
	// IdentityAuthenticationFailedReason: Entra ID refused the identity's
	// credential (a wrong or expired secret, an unknown client).
	IdentityAuthenticationFailedReason = "IdentityAuthenticationFailed"
	// CustomCloudNotConfiguredReason: the cluster names a Custom cloud the
	// operator did not configure; no credential is sent to its hosts.
	CustomCloudNotConfiguredReason = "CustomCloudNotConfigured"
	// ManagerCredentialNotAllowedReason: a cluster without an identityRef
	// in a namespace the operator did not enable the manager's own
	// credential for.
	ManagerCredentialNotAllowedReason = "ManagerCredentialNotAllowed"
	// AmbientIdentityNotAllowedReason: a WorkloadIdentity or
	// UserAssignedMSI identity outside the namespaces the operator keeps
	// them in. Such an identity has no secret of its own: its token is
	// the manager's (its service-account token, its host's managed
	// identity), so whoever may write one could act as any principal that
	// trusts the manager.
	AmbientIdentityNotAllowedReason = "AmbientIdentityNotAllowed"
	// ClusterIdentityUnknownReason: an object's AzureCluster is gone, so
	// the identity its resources were made as is unknown.
	ClusterIdentityUnknownReason = "ClusterIdentityUnknown"
)

// Reasons of the BootstrapSucceeded condition.
const (
	// WaitingForNodeReason: provisioned, no node yet, within the deadline.
	WaitingForNodeReason = "WaitingForNode"
	// BootstrapFailedReason: no node by the deadline; the message has the
	// cause and the end of the bootstrap log.
	BootstrapFailedReason = "BootstrapFailed"
	NodeJoinedReason      = "NodeJoined"
)

// Reasons of the CloudProviderCredentials condition.
const (
	// NoCloudProviderCredentialsReason: azure.json would have the cloud
	// provider use the VM's managed identity, and the VM has none.
	NoCloudProviderCredentialsReason = "NoManagedIdentity"
	// IdentityNotAttachedReason: azure.json names the cluster's
	// user-assigned identity, and the VM does not have it.
	IdentityNotAttachedReason = "UserAssignedIdentityNotAttached"
)

// Event reasons.
const (
	// RecordDroppedReason: a recorded resource that Azure does not show as
	// the object's was forgotten, not deleted.
	RecordDroppedReason = "RecordDropped"
	// ForeignOperationReason: a recorded operation that would poll another
	// host than the ARM endpoint was dropped.
	ForeignOperationReason = "ForeignOperationDropped"
)
