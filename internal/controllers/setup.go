package controllers

import (
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/winkube/winkube/internal/azure/cloud"
)

// Options configure winkube's controllers.
type Options struct {
	Cloud *cloud.Cloud
	// FederatedTokenFile is the manager's service-account token for
	// WorkloadIdentity identities (AZURE_FEDERATED_TOKEN_FILE).
	FederatedTokenFile string
	// CustomClouds are the clouds besides Azure's named ones that
	// clusters may pick (see Identities.CustomClouds).
	CustomClouds []cloud.CustomCloud
	// ManagerCredentialNamespaces are the namespaces whose clusters may
	// act as the manager's own credential, without an identityRef
	// (AllNamespaces for all; none when empty).
	ManagerCredentialNamespaces []string
	// AmbientIdentityNamespaces are the namespaces whose WorkloadIdentity
	// and UserAssignedMSI identities are honoured (see
	// Identities.AmbientIdentityNamespaces; none when empty).
	AmbientIdentityNamespaces []string
	// Concurrency is the number of objects of each kind reconciled at once.
	Concurrency int
	// Requeue is how soon an operation under way is looked at again.
	Requeue time.Duration
	// MinThrottleWait is the shortest wait after Azure refuses a request
	// for now (DefaultMinThrottleWait when zero). Tests against the
	// emulator, whose 429s ask for milliseconds, set it lower.
	MinThrottleWait time.Duration
	// SkipNameValidation lets several managers run in one process (tests
	// that restart the manager).
	SkipNameValidation bool
	// TenantID is the Azure tenant written to the nodes' cloud provider
	// config (azure.json); AZURE_TENANT_ID when empty.
	TenantID string
	// BootstrapTimeout and PoolBootstrapTimeout are how long a provisioned
	// VM, or scale-set instance, may take to become a node before its
	// bootstrap is called failed and its log read through Azure
	// (DefaultBootstrapTimeout, DefaultPoolBootstrapTimeout when zero).
	BootstrapTimeout, PoolBootstrapTimeout time.Duration
	// RunCommandConcurrency is how many Run Commands (a failed bootstrap's
	// log read through Azure) the manager has under way at once, across
	// machines and pool machines (DefaultRunCommandConcurrency when zero).
	RunCommandConcurrency int
	// RoleAssignmentScopes are the ARM scopes, beyond each cluster's own
	// resource group, where the manager grants a machine's system-assigned
	// identity the role its systemAssignedIdentityRole asks for (a
	// subscription, another group). Empty: the cluster's group only.
	RoleAssignmentScopes []string
}

// Setup registers every winkube controller with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	// The priority queue of controller-runtime v0.24.1 can deadlock on
	// shutdown (handing an item to a worker that has stopped, while holding
	// the lock that Done needs): a manager stopped mid-work then hangs for its
	// whole grace period. The plain rate-limited queue stops cleanly.
	opts := controller.Options{MaxConcurrentReconciles: o.Concurrency, SkipNameValidation: &o.SkipNameValidation, UsePriorityQueue: ptr.To(false)}
	ids, err := newIdentities(mgr, o.Cloud, o)
	if err != nil {
		return err
	}
	if err := (&AzureClusterReconciler{Client: mgr.GetClient(), MinThrottleWait: o.MinThrottleWait, Cloud: o.Cloud, Identities: ids, Requeue: o.Requeue}).SetupWithManager(mgr, opts); err != nil {
		return err
	}
	slots := newRunCommandSlots(o.RunCommandConcurrency)
	if err := (&AzureMachineReconciler{Client: mgr.GetClient(), MinThrottleWait: o.MinThrottleWait, Cloud: o.Cloud, Identities: ids, Requeue: o.Requeue, BootstrapTimeout: o.BootstrapTimeout, RoleAssignmentScopes: o.RoleAssignmentScopes, boot: bootstrapWatch{slots: slots}}).SetupWithManager(mgr, opts); err != nil {
		return err
	}
	if err := (&AzureMachinePoolReconciler{Client: mgr.GetClient(), MinThrottleWait: o.MinThrottleWait, Reader: mgr.GetAPIReader(), Cloud: o.Cloud, Identities: ids, Requeue: o.Requeue, RoleAssignmentScopes: o.RoleAssignmentScopes}).SetupWithManager(mgr, opts); err != nil {
		return err
	}
	if err := (&AzureMachinePoolMachineReconciler{Client: mgr.GetClient(), MinThrottleWait: o.MinThrottleWait, Reader: mgr.GetAPIReader(), Cloud: o.Cloud, Identities: ids, Requeue: o.Requeue, BootstrapTimeout: o.PoolBootstrapTimeout, boot: bootstrapWatch{slots: slots}}).SetupWithManager(mgr, opts); err != nil {
		return err
	}
	if err := (&AddonVersionReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr, opts); err != nil {
		return err
	}
	for _, kind := range []string{"AzureMachineTemplate", "AzureMachinePool", "AzureMachine"} {
		if err := (&AzureJSONReconciler{Client: mgr.GetClient(), Secrets: mgr.GetCache(), Kind: kind, TenantID: o.TenantID, Credentials: ids.azureJSONCredentials(o.TenantID), IdentityClientID: ids.userAssignedClientID}).SetupWithManager(mgr, opts); err != nil {
			return err
		}
	}
	return nil
}
