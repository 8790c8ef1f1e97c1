package controllers

import (
	"context"
	"errors"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azurejson"
)

// CloudProviderCredentials lets the external tests read an identity's
// secret the way the azure.json reconciler does.
func (i *Identities) CloudProviderCredentials(ctx context.Context, ac *infrav1.AzureCluster) (azurejson.Credentials, bool, error) {
	return i.cloudProviderCredentials(ctx, ac)
}

// IdentityErrorReason is the condition reason an identity error sets, ""
// for other errors.
func IdentityErrorReason(err error) string {
	if ie := (*identityError)(nil); errors.As(err, &ie) {
		return ie.reason
	}
	return ""
}
