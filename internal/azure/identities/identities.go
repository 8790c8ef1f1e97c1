// Package identities reads the user-assigned managed identities a cluster's
// VMs take (Microsoft.ManagedIdentity), which are made outside winkube.
package identities

import (
	"context"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// ARMID is an identity's ARM ID from a providerID written either way CAPZ
// accepts: with its azure:// prefix or without.
func ARMID(providerID string) string {
	return "/" + strings.TrimLeft(strings.TrimPrefix(providerID, "azure://"), "/")
}

// Service reads identities in any subscription the credential reaches.
type Service struct{ cfg endpoint.Config }

// New returns a Service.
func New(cfg endpoint.Config) *Service { return &Service{cfg: cfg} }

// ClientID is the identity's client ID, which azure.json's
// userAssignedIdentityID names; an identity that does not exist is an
// error that says so.
func (s *Service) ClientID(ctx context.Context, providerID string) (string, error) {
	id, err := arm.ParseResourceID(ARMID(providerID))
	if err != nil || !strings.EqualFold(id.ResourceType.String(), "Microsoft.ManagedIdentity/userAssignedIdentities") {
		return "", fmt.Errorf("%q is not a user-assigned identity's ID (/subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>)", providerID)
	}
	c, err := endpoint.NewClient(s.cfg, id.SubscriptionID, armmsi.NewUserAssignedIdentitiesClient)
	if err != nil {
		return "", err
	}
	got, err := c.Get(ctx, id.ResourceGroupName, id.Name, nil)
	if err != nil {
		return "", err
	}
	if got.Properties == nil || got.Properties.ClientID == nil {
		return "", fmt.Errorf("user-assigned identity %s has no client ID yet", id.Name)
	}
	return *got.Properties.ClientID, nil
}
