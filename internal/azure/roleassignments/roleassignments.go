// Package roleassignments grants a VM's system-assigned identity the role
// its cloud provider needs, as CAPZ does (azure/services/roleassignments
// @69ec3a40): one assignment per VM or scale set, made once it has its
// principal, deleted with it.
package roleassignments

import (
	"context"
	"crypto/sha1"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"

	"github.com/winkube/winkube/internal/azure/async"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

// ContributorRole is the built-in Contributor role's GUID (Azure RBAC
// "built-in roles" page): it may change every resource but not grant
// access, which is what cloud-provider-azure needs of its resource group.
const ContributorRole = "b24988ac-6180-42a0-ab88-20f7382dd24c"

// Built-in roles that let their holder grant access (Azure RBAC "built-in
// roles" page): Owner, User Access Administrator and Role Based Access
// Control Administrator.
var accessRoles = []string{"8e3af657-a8ff-443c-a75c-2fe8c4bcb635", "18d7d88d-d35e-4fb5-a5c3-7773c4a72b9d", "f58310d9-a9f6-439a-9e8d-f62e7b41a168"}

// GrantsAccess reports whether a role definition (a GUID or an ARM ID
// ending in one) is a built-in role that may create role assignments: a VM
// holding it can give anyone anything within its scope.
func GrantsAccess(definition string) bool {
	guid := definition[strings.LastIndex(definition, "/")+1:]
	for _, r := range accessRoles {
		if strings.EqualFold(guid, r) {
			return true
		}
	}
	return false
}

// DefinitionID is a role definition's ARM ID: a full ID is kept, a bare
// GUID is made the subscription's built-in definition.
func DefinitionID(subscription, role string) string {
	if strings.HasPrefix(role, "/") {
		return role
	}
	return "/subscriptions/" + subscription + "/providers/Microsoft.Authorization/roleDefinitions/" + role
}

// Name is the assignment's name for a principal, role and scope: a GUID
// Azure requires, the same on every reconcile (so that a crash between
// the PUT and recording it makes no second assignment), and different for
// a VM made again with a new principal.
func Name(principalID, definitionID, scope string) string {
	h := sha1.Sum([]byte(strings.ToLower(principalID + "|" + definitionID + "|" + scope)))
	h[6] = h[6]&0x0f | 0x50 // a name-based (version 5 style) UUID
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// ID is an assignment's ARM ID.
func ID(scope, name string) string {
	return strings.TrimRight(scope, "/") + "/providers/Microsoft.Authorization/roleAssignments/" + name
}

// Spec is one role assignment.
type Spec struct {
	Scope, Name, DefinitionID, PrincipalID string
}

// ResourceRef makes a Spec an async.Spec: the scope stands where a
// resource group would.
func (s Spec) ResourceRef() async.Ref { return async.Ref{ResourceGroup: s.Scope, Name: s.Name} }

// OwnerTags is nil: assignments have no tags; the name, derived from the
// principal, is the ownership.
func (s Spec) OwnerTags() map[string]*string { return nil }

// Parameters makes the assignment once; an existing one is never changed
// (Azure does not update an assignment's role or principal). CAPZ takes any
// existing assignment of the name as done (azure/services/roleassignments/
// spec.go Parameters at kubernetes-sigs/cluster-api-provider-azure
// 608297da), and names it with a random UUID defaulted into the spec, with
// the subscription as the default scope (api/v1beta1/azuremachine_default.go
// SetDefaultAzureMachineSpecIdentity at 6372a051); winkube derives the name
// (Name), defaults to the cluster's group, and compares. An existing
// assignment of the name that grants another principal, or another role,
// is someone else's: it is refused (*ConflictError), never taken for
// granted, so that a spec naming it neither counts as granted nor makes it
// this machine's to delete.
func (s Spec) Parameters(existing *armauthorization.RoleAssignment) (*armauthorization.RoleAssignmentCreateParameters, error) {
	if existing != nil {
		if !Grants(existing, s.PrincipalID, s.DefinitionID) {
			return nil, &ConflictError{ID: ID(s.Scope, s.Name), Principal: s.PrincipalID}
		}
		return nil, nil
	}
	return &armauthorization.RoleAssignmentCreateParameters{Properties: &armauthorization.RoleAssignmentProperties{
		RoleDefinitionID: to.Ptr(s.DefinitionID), PrincipalID: to.Ptr(s.PrincipalID),
		// A managed identity's principal is a service principal; saying so
		// spares Azure the directory lookup that fails while a new identity
		// is replicating (PrincipalNotFound).
		PrincipalType: to.Ptr(armauthorization.PrincipalTypeServicePrincipal),
	}}, nil
}

// Grants reports whether an assignment gives principal the role definition.
func Grants(a *armauthorization.RoleAssignment, principal, definitionID string) bool {
	if a == nil || a.Properties == nil {
		return false
	}
	return strings.EqualFold(ptrOr(a.Properties.PrincipalID), principal) && strings.EqualFold(ptrOr(a.Properties.RoleDefinitionID), definitionID)
}

// PrincipalOf is the principal an assignment grants its role to.
func PrincipalOf(a *armauthorization.RoleAssignment) string {
	if a == nil || a.Properties == nil {
		return ""
	}
	return ptrOr(a.Properties.PrincipalID)
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ConflictError is an existing assignment of the name a spec asks for that
// grants another principal or another role.
type ConflictError struct{ ID, Principal string }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("role assignment %s already exists and grants another principal or role than this VM's identity (%s): it is someone else's, "+
		"and winkube will neither count it as granted nor delete it; remove systemAssignedIdentityRole.name to let winkube derive the assignment's name", e.ID, e.Principal)
}

// Service manages role assignments.
type Service struct {
	kind *async.Kind[armauthorization.RoleAssignment]
}

// New returns a Service.
func New(subscription string, cfg endpoint.Config) (*Service, error) {
	c, err := endpoint.NewClient(cfg, subscription, armauthorization.NewRoleAssignmentsClient)
	if err != nil {
		return nil, err
	}
	return &Service{kind: &async.Kind[armauthorization.RoleAssignment]{
		Noun: "role assignment",
		Get: func(ctx context.Context, r async.Ref) (*armauthorization.RoleAssignment, error) {
			cur, err := c.Get(ctx, r.ResourceGroup, r.Name, nil)
			return &cur.RoleAssignment, err
		},
		// Both are synchronous in the Authorization spec.
		Put: func(ctx context.Context, r async.Ref, body armauthorization.RoleAssignment, _ string) (async.Poller, error) {
			_, err := c.Create(ctx, r.ResourceGroup, r.Name, armauthorization.RoleAssignmentCreateParameters{Properties: body.Properties}, nil)
			return async.Sync(err)
		},
		Delete: func(ctx context.Context, r async.Ref, _ string) (async.Poller, error) {
			_, err := c.Delete(ctx, r.ResourceGroup, r.Name, nil)
			return async.Sync(err)
		},
	}}, nil
}

// Reconcile makes the assignment when it is missing.
func (s *Service) Reconcile(ctx context.Context, spec Spec) error {
	_, _, err := async.Reconcile(ctx, s.kind, asAssignment{spec}, "")
	return err
}

// Get returns the assignment of an ARM ID, or nil when it does not exist.
func (s *Service) Get(ctx context.Context, id string) (*armauthorization.RoleAssignment, error) {
	scope, name, ok := strings.Cut(id, "/providers/Microsoft.Authorization/roleAssignments/")
	if !ok {
		return nil, fmt.Errorf("%s is not a role assignment's ID", id)
	}
	return s.kind.Read(ctx, async.Ref{ResourceGroup: scope, Name: name})
}

// Delete removes the assignment of an ARM ID; one already gone is done.
func (s *Service) Delete(ctx context.Context, id string) error {
	scope, name, ok := strings.Cut(id, "/providers/Microsoft.Authorization/roleAssignments/")
	if !ok {
		return fmt.Errorf("%s is not a role assignment's ID", id)
	}
	_, _, err := async.Remove(ctx, s.kind, async.Ref{ResourceGroup: scope, Name: name}, "")
	return err
}

// asAssignment gives the generic reconciler the PUT body in the type it
// reads (a RoleAssignment's properties are the create parameters').
type asAssignment struct{ Spec }

func (a asAssignment) Parameters(existing *armauthorization.RoleAssignment) (*armauthorization.RoleAssignment, error) {
	p, err := a.Spec.Parameters(existing)
	if p == nil || err != nil {
		return nil, err
	}
	return &armauthorization.RoleAssignment{Properties: p.Properties}, nil
}
