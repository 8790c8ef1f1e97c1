package arm

import (
	"net/http"
	"sort"
	"strings"

	"github.com/winkube/winkube/emulator/entra"
)

// Managed identities: user-assigned identities (Microsoft.ManagedIdentity/
// userAssignedIdentities) and the identity block of VMs and scale sets.
// Each identity is a principal of kind ManagedIdentity in the Entra
// directory, so that role assignments name it and the Instance Metadata
// Service (imds.go) issues its tokens.

const kindIdentity = "Microsoft.ManagedIdentity/userAssignedIdentities"

func init() {
	register(&kindInfo{typ: kindIdentity, topLevel: true, sync: true, put: putIdentity, deleted: identityDeleted})
}

// defaultTenant is the tenant of identities created by a caller with no
// tenant (the static token of tests that are not about identity).
const defaultTenant = "00000000-0000-0000-0000-000000000000"

func tenantOf(r *resource) string {
	if r.tenant != "" {
		return r.tenant
	}
	return defaultTenant
}

// putIdentity gives a new identity its principal; a PUT of an existing one
// keeps it. The properties are those of armmsi v1.3.0's
// UserAssignedIdentityProperties: principalId, clientId, tenantId (all
// read-only), isolationScope.
func putIdentity(s *Server, r, old *resource) *armError {
	p := r.props()
	for _, f := range []string{"principalId", "clientId", "tenantId"} {
		delete(p, f)
	}
	if old != nil {
		for _, f := range []string{"principalId", "clientId", "tenantId"} {
			p[f] = old.props()[f]
		}
		return nil
	}
	p["tenantId"], p["clientId"], p["principalId"] = tenantOf(r), newUUID(), newUUID()
	return s.addPrincipal(str(p, "tenantId"), str(p, "clientId"), str(p, "principalId"), r.id.Name())
}

func (s *Server) addPrincipal(tenant, clientID, objectID, name string) *armError {
	if s.opts.Directory == nil {
		return nil
	}
	if err := s.opts.Directory.AddPrincipal(entra.Principal{Kind: entra.ManagedIdentity, TenantID: tenant, ClientID: clientID, ObjectID: objectID, DisplayName: name}); err != nil {
		return errorf(http.StatusInternalServerError, "InternalServerError", "%v", err)
	}
	return nil
}

func (s *Server) removePrincipal(clientID string) {
	if s.opts.Directory != nil && clientID != "" {
		s.opts.Directory.RemovePrincipal(clientID)
	}
}

// identityDeleted removes the identity's principal. Its role assignments
// stay, naming a principal that no longer exists, as they do on Azure.
func identityDeleted(s *Server, r *resource) []string {
	s.removePrincipal(str(r.props(), "clientId"))
	return nil
}

// Identity types of a VM or scale set (armcompute v7 ResourceIdentityType).
const (
	identityNone   = "None"
	identitySystem = "SystemAssigned"
	identityUser   = "UserAssigned"
	identityBoth   = "SystemAssigned, UserAssigned"
)

// checkIdentity validates a VM's or scale set's identity block before
// anything changes: a known type, user-assigned identities only with a
// type that has them, and each of them existing. Azure refuses a missing
// one with 400 FailedIdentityOperation, quoting the identity service's
// answer (Azure/azure-policy#1311, Azure/azure-cli#31837).
func (s *Server) checkIdentity(r *resource) *armError {
	id, ok := r.body["identity"].(map[string]any)
	if !ok {
		return nil
	}
	typ := str(id, "type")
	switch typ {
	case identityNone, identitySystem, identityUser, identityBoth, "":
	default:
		return invalidParameter("identity.type", "The value '%s' of parameter 'identity.type' is invalid; allowed values are '%s', '%s', '%s', '%s'.", typ, identitySystem, identityUser, identityBoth, identityNone)
	}
	users := obj(id, "userAssignedIdentities")
	hasUser := strings.Contains(typ, identityUser)
	if len(users) > 0 && !hasUser {
		return invalidParameter("identity.userAssignedIdentities", "The identity type '%s' does not allow userAssignedIdentities; use '%s' or '%s'.", typ, identityUser, identityBoth)
	}
	if hasUser && len(users) == 0 {
		return invalidParameter("identity.userAssignedIdentities", "The identity type '%s' needs at least one user-assigned identity.", typ)
	}
	for ref := range users {
		if uai := s.lookup(ref); uai == nil || !strings.EqualFold(uai.kind.typ, kindIdentity) {
			return errorf(http.StatusBadRequest, "FailedIdentityOperation",
				"Identity operation for resource '%s' failed with error 'Failed to perform resource identity operation. Status: 'BadRequest'. Response: '{\"error\":{\"code\":\"BadRequest\",\"message\":\"Resource '%s' was not found.\"}}'.'.",
				r.idStr, ref)
		}
	}
	return nil
}

// applyIdentity fills in what Azure adds to a valid identity block: the
// system-assigned principal (kept from the old model, or created) with the
// tenant, and each user-assigned identity's principalId and clientId. A
// system-assigned principal the new model drops is deleted.
func (s *Server) applyIdentity(r, old *resource) *armError {
	var oldSystem string
	if old != nil {
		oldSystem, _ = old.secrets["systemIdentityClientId"].(string)
	}
	delete(r.secrets, "systemIdentityClientId")
	id, ok := r.body["identity"].(map[string]any)
	typ := str(id, "type")
	if !ok || typ == identityNone || typ == "" {
		delete(r.body, "identity")
		s.removePrincipal(oldSystem)
		return nil
	}
	delete(id, "principalId")
	delete(id, "tenantId")
	if strings.Contains(typ, identitySystem) {
		if oldSystem != "" {
			oid := old.body["identity"].(map[string]any)
			id["principalId"], id["tenantId"] = oid["principalId"], oid["tenantId"]
			r.secrets["systemIdentityClientId"] = oldSystem
		} else {
			clientID, objectID := newUUID(), newUUID()
			if e := s.addPrincipal(tenantOf(r), clientID, objectID, r.id.Name()); e != nil {
				return e
			}
			id["principalId"], id["tenantId"] = objectID, tenantOf(r)
			r.secrets["systemIdentityClientId"] = clientID
		}
	} else {
		s.removePrincipal(oldSystem)
	}
	users := obj(id, "userAssignedIdentities")
	for ref := range users {
		uai := s.lookup(ref)
		users[ref] = map[string]any{"principalId": str(uai.props(), "principalId"), "clientId": str(uai.props(), "clientId")}
	}
	if len(users) == 0 {
		delete(id, "userAssignedIdentities")
	}
	return nil
}

// dropIdentity deletes a VM's or scale set's system-assigned principal
// with it.
func (s *Server) dropIdentity(r *resource) {
	if c, _ := r.secrets["systemIdentityClientId"].(string); c != "" {
		s.removePrincipal(c)
	}
}

// machineIdentity is one identity a machine may get tokens for.
type machineIdentity struct {
	clientID, objectID, resourceID string
	system                         bool
}

// identitiesOf are the identities attached to a VM, or to the scale set of
// an instance, as they are now: system-assigned first, then user-assigned
// in ID order.
func (s *Server) identitiesOf(machineID string) []machineIdentity {
	r := s.lookup(machineID)
	if r == nil {
		return nil
	}
	if r.kind.typ == kindInstance {
		parent, _ := r.id.Parent()
		if r = s.lookup(parent.String()); r == nil {
			return nil
		}
	}
	id, _ := r.body["identity"].(map[string]any)
	var out []machineIdentity
	if c, _ := r.secrets["systemIdentityClientId"].(string); c != "" {
		out = append(out, machineIdentity{clientID: c, objectID: str(id, "principalId"), system: true})
	}
	refs := make([]string, 0)
	users, _ := id["userAssignedIdentities"].(map[string]any) // a VM without an identity has no block
	for ref := range users {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		if uai := s.lookup(ref); uai != nil {
			out = append(out, machineIdentity{clientID: str(uai.props(), "clientId"), objectID: str(uai.props(), "principalId"), resourceID: uai.idStr})
		}
	}
	return out
}
