package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/identities"
	"github.com/winkube/winkube/internal/azure/roleassignments"
	"github.com/winkube/winkube/internal/azure/tags"
)

// RoleAssignmentFailedReason is infrav1's.
const RoleAssignmentFailedReason = infrav1.RoleAssignmentFailedReason

// principalReplication is how soon a role assignment Azure refused for a
// principal it does not know yet is tried again: a new identity takes
// seconds to a few minutes to reach every replica of the directory.
const principalReplication = 15 * time.Second

// roleRecheck is when a role assignment Azure refused the manager is
// tried again: granting the manager the right role sends no event.
const roleRecheck = time.Minute

// vmIdentity is the identity block a VM spec sends: the kind and the
// user-assigned identities' ARM IDs.
func vmIdentity(s *infrav1.AzureVMSpec) (string, []string) {
	switch s.Identity {
	case infrav1.VMIdentitySystemAssigned:
		return string(s.Identity), nil
	case infrav1.VMIdentityUserAssigned:
		var ids []string
		for _, u := range s.UserAssignedIdentities {
			ids = append(ids, identities.ARMID(u.ProviderID))
		}
		return string(s.Identity), ids
	}
	return "", nil
}

// roleOf is a system-assigned identity's role assignment as the spec
// asks: by default Contributor on the cluster's resource group, the
// narrowest scope where the cloud provider's load balancers, public IPs,
// security group and routes are.
func roleOf(s *infrav1.AzureVMSpec, subscription, rg, principal string) roleassignments.Spec {
	r := infrav1.SystemAssignedIdentityRole{}
	if s.SystemAssignedIdentityRole != nil {
		r = *s.SystemAssignedIdentityRole
	}
	if r.Scope == "" {
		r.Scope = resourceGroupID(subscription, rg)
	}
	if r.DefinitionID == "" {
		r.DefinitionID = roleassignments.ContributorRole
	}
	def := roleassignments.DefinitionID(subscription, r.DefinitionID)
	if r.Name == "" {
		r.Name = roleassignments.Name(principal, def, r.Scope)
	}
	return roleassignments.Spec{Scope: r.Scope, Name: r.Name, DefinitionID: def, PrincipalID: principal}
}

// roleGrant is how far granting an identity its role got.
type roleGrant struct {
	// done: the role is granted.
	done bool
	// after, with reason and msg: the reconcile stops and comes back then.
	after       time.Duration
	reason, msg string
}

// scopeAllowed reports whether the manager grants roles at scope: the
// cluster's resource group (or a resource in it), or one of the scopes the
// operator allowed (Options.RoleAssignmentScopes) or a scope under one. A
// tenant writes systemAssignedIdentityRole; without this, the manager's
// credential would grant the tenant's VM any role on the whole
// subscription.
func scopeAllowed(scope, subscription, rg string, allowed []string) bool {
	under := func(parent string) bool { return scopeUnder(scope, parent) }
	if under(resourceGroupID(subscription, rg)) {
		return true
	}
	return slices.ContainsFunc(allowed, under)
}

// scopeUnder reports whether scope is parent or a scope under it.
func scopeUnder(scope, parent string) bool {
	parent = strings.TrimRight(parent, "/")
	return parent != "" && (strings.EqualFold(scope, parent) || strings.HasPrefix(strings.ToLower(scope), strings.ToLower(parent)+"/"))
}

// groupGrantable says whether a role may be granted in the cluster's
// resource group rg: done when the group is the cluster's own (its owner
// tags), or a group the user brought, which carries no winkube cluster's
// tags. The AzureCluster refuses another cluster's group (scopeGroup), but
// a machine may be built from an AzureCluster that is refused (a Cluster's
// infrastructureRef may be repointed once it is provisioned): the grant is
// checked on its own, or a tenant's VM would hold Contributor on another
// cluster's group.
//
// A group the user brought is granted as the cluster's own, as the README
// and CAPZ do (Contributor on the cluster's resource group, whoever made
// it): cloud-provider-azure on the node needs it there for load balancers
// and routes, and winkube already builds the cluster's network and VMs in
// that group with the cluster's identity. The assignment is written with
// that identity too, so Azure grants it only where the operator gave the
// identity User Access Administrator: which untagged groups a namespace's
// machines may hold roles on is the operator's choice of scopes for the
// identity, not the tenant's.
func groupGrantable(ctx context.Context, svc *cloud.Services, rg string, owner tags.Owner) (roleGrant, error) {
	g, err := svc.Groups.Get(ctx, rg)
	if err != nil {
		return roleGrant{}, err
	}
	if g == nil {
		return roleGrant{done: true}, nil
	}
	if e := owner.RefuseForeign("resource group", rg, g.Tags); e != nil {
		return roleGrant{after: roleRecheck, reason: ResourceNotOwnedReason, msg: e.Error()}, nil
	}
	return roleGrant{done: true}, nil
}

// grantRole gives a VM's or scale set's system-assigned identity its role,
// recording the assignment in created before it is made, so that it goes
// with its owner. An error is Azure's, for the caller's azureError.
// allowed are the scopes beyond the cluster's resource group where the
// operator lets the manager grant roles; owner is the cluster's, whose
// group it must be (groupGrantable).
func grantRole(ctx context.Context, svc *cloud.Services, created *[]string, vm *infrav1.AzureVMSpec, subscription, rg, principal string, allowed []string, owner tags.Owner) (roleGrant, error) {
	if principal == "" {
		return roleGrant{after: 5 * time.Second, reason: ProvisioningReason, msg: "waiting for Azure to make the system-assigned identity"}, nil
	}
	spec := roleOf(vm, subscription, rg, principal)
	if !scopeAllowed(spec.Scope, subscription, rg, allowed) {
		return roleGrant{after: roleRecheck, reason: RoleAssignmentFailedReason, msg: fmt.Sprintf(
			"systemAssignedIdentityRole.scope %s is outside the cluster's resource group %s: the manager grants roles there only where its operator allows "+
				"(the manager's role-assignment scopes); use the resource group's scope, or ask the operator", spec.Scope, rg)}, nil
	}
	if roleassignments.GrantsAccess(spec.DefinitionID) {
		return roleGrant{after: roleRecheck, reason: RoleAssignmentFailedReason, msg: fmt.Sprintf(
			"systemAssignedIdentityRole.definitionID %s lets its holder grant access (Owner, User Access Administrator or Role Based Access Control Administrator): "+
				"winkube does not give a VM that; choose a role without Microsoft.Authorization write", spec.DefinitionID)}, nil
	}
	id := roleassignments.ID(spec.Scope, spec.Name)
	if claim(created, id) {
		return roleGrant{after: persisted, reason: ProvisioningReason, msg: "recording the identity's role assignment"}, nil
	}
	cur, err := svc.Roles.Get(ctx, id)
	if err == nil {
		if roleassignments.Grants(cur, principal, spec.DefinitionID) {
			// In place: what Reconcile would find, without reading it again.
			return roleGrant{done: true}, nil
		}
		if !slices.ContainsFunc(allowed, func(parent string) bool { return scopeUnder(spec.Scope, parent) }) {
			// Not a scope the operator listed: the cluster's group, which
			// must be the cluster's, or the user's (read only until the
			// role is granted).
			// The record stays: a missing assignment is done with at
			// deletion, and the machine does not rewrite it every minute.
			if g, err := groupGrantable(ctx, svc, rg, owner); err != nil || !g.done {
				return g, err
			}
		}
		err = svc.Roles.Reconcile(ctx, spec)
	}
	var re *azcore.ResponseError
	var conflict *roleassignments.ConflictError
	switch {
	case err == nil:
		return roleGrant{done: true}, nil
	case errors.As(err, &conflict):
		// Someone else's assignment: not this machine's to keep, nor to
		// delete.
		unclaim(created, id)
		return roleGrant{after: roleRecheck, reason: RoleAssignmentFailedReason, msg: err.Error()}, nil
	case errors.As(err, &re) && re.ErrorCode == "PrincipalNotFound":
		return roleGrant{after: principalReplication, reason: ProvisioningReason, msg: "waiting for the new identity to reach Azure's directory before granting it its role"}, nil
	case errors.As(err, &re) && (re.StatusCode == http.StatusForbidden || re.ErrorCode == "AuthorizationFailed"):
		return roleGrant{after: roleRecheck, reason: RoleAssignmentFailedReason, msg: fmt.Sprintf(
			"the manager may not grant the identity its role at %s (Azure: %s): give the manager's identity User Access Administrator or Owner there, "+
				"or use identity: UserAssigned with an identity you granted the role yourself", spec.Scope, re.ErrorCode)}, nil
	}
	return roleGrant{}, err
}

// The CloudProviderCredentials condition's reasons (api/v1alpha1).
const (
	NoCloudProviderCredentialsReason = infrav1.NoCloudProviderCredentialsReason
	IdentityNotAttachedReason        = infrav1.IdentityNotAttachedReason
)

// checkCloudProviderCredentials sets CloudProviderCredentials: on Azure,
// cloud-provider-azure with useManagedIdentityExtension asks the VM's
// Instance Metadata Service for a token, which a VM without an identity
// does not get, and every load balancer and route it manages fails.
func checkCloudProviderCredentials(ctx context.Context, ids *Identities, obj conditions.Setter, vm *infrav1.AzureVMSpec, ac *infrav1.AzureCluster) {
	if vm.Identity == infrav1.VMIdentitySystemAssigned || vm.Identity == infrav1.VMIdentityUserAssigned {
		conditions.Set(obj, metav1.Condition{Type: CloudProviderCredentialsCondition, Status: metav1.ConditionTrue, Reason: "ManagedIdentity"})
		return
	}
	creds, ok, err := ids.cloudProviderCredentials(ctx, ac)
	if err != nil {
		return // the identity's own condition says what is wrong
	}
	if ok && creds.ClientSecret == "" && creds.UserAssignedIdentityID != "" {
		// IMDS issues tokens only for identities on the VM; this one has
		// none ("Identity not found").
		conditions.Set(obj, metav1.Condition{Type: CloudProviderCredentialsCondition, Status: metav1.ConditionFalse, Reason: IdentityNotAttachedReason,
			Message: fmt.Sprintf("the cloud provider on this node would authenticate as user-assigned identity %s (the cluster's AzureClusterIdentity), which is not attached to this VM: its Instance Metadata Service would refuse the token. "+
				"Set identity: UserAssigned with userAssignedIdentities naming that identity, or identity: SystemAssigned", creds.UserAssignedIdentityID)})
		return
	}
	if ok {
		conditions.Set(obj, metav1.Condition{Type: CloudProviderCredentialsCondition, Status: metav1.ConditionTrue, Reason: "ClusterIdentity"})
		return
	}
	conditions.Set(obj, metav1.Condition{Type: CloudProviderCredentialsCondition, Status: metav1.ConditionFalse, Reason: NoCloudProviderCredentialsReason,
		Message: "the cloud provider on this node would authenticate as the VM's managed identity, and the VM has none: on Azure its load balancers and routes would fail. " +
			"Set identity: SystemAssigned (winkube grants it Contributor on the cluster's resource group) or UserAssigned, or give the AzureCluster an identityRef of type ServicePrincipal or UserAssignedMSI"})
}
