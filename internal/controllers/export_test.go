package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azurejson"
)

// CloudProviderCredentials lets the external tests read an identity's
// secret the way the azure.json reconciler does.
func (i *Identities) CloudProviderCredentials(ctx context.Context, ac *infrav1.AzureCluster) (azurejson.Credentials, bool, error) {
	return i.cloudProviderCredentials(ctx, ac)
}

// SecretWatchMax is the cap on a SecretWatch's watches.
const SecretWatchMax = secretWatchMax

// SetMax sets the cap on w's watches, for a test to reach it with a few
// Secrets; Watched is how many run.
// SetMax is called before w's first read.
func (w *SecretWatch) SetMax(n int) {
	*w = *newSecretWatch(w.client, w.done, n)
}

// Watched is how many Secrets w watches.
func (w *SecretWatch) Watched() int { return w.w.Watched() }

// Max is w's cap.
func (w *SecretWatch) Max() int { return w.w.Max() }

// ReadSecret is readSecret, for the tests of the watch's fallback.
func (i *Identities) ReadSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	return i.readSecret(ctx, key)
}

// MachineChanged is the filter of the Machine updates that wake an
// AzureMachine.
var MachineChanged = machineChanged

// AzureMachineChanged is the filter of the AzureMachine updates that wake
// it.
var AzureMachineChanged = azureMachineChanged

// AzureClusterChanged, AzureMachinePoolChanged and
// AzureMachinePoolMachineChanged are the filters of the updates of those
// kinds that wake their own controllers.
var (
	AzureClusterChanged            = azureClusterChanged
	AzureMachinePoolChanged        = azureMachinePoolChanged
	AzureMachinePoolMachineChanged = azureMachinePoolMachineChanged
)

// RememberFollowed records the Cluster key as settled, as a reconcile
// that found its add-ons at its control plane's version does.
func (r *AddonVersionReconciler) RememberFollowed(key types.NamespacedName) {
	r.followed.Store(key, "settled")
}

// FollowedClusters is how many Clusters the add-on version controller
// remembers as settled.
func (r *AddonVersionReconciler) FollowedClusters() int {
	n := 0
	r.followed.Range(func(any, any) bool { n++; return true })
	return n
}
