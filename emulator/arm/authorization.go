package arm

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/winkube/winkube/emulator/entra"
)

// Microsoft.Authorization: role assignments and the built-in role
// definitions, at any scope. The directory holds the assignments, so that
// one made here is what ARM's RBAC (auth.go) enforces. Who may write them
// is RBAC's own question: Microsoft.Authorization/roleAssignments/write,
// which Owner and User Access Administrator have and Contributor does not
// (its NotActions hold Microsoft.Authorization/*/Write).
//
// The shapes are armauthorization/v2 v2.2.0's RoleAssignment (properties
// roleDefinitionId, principalId, principalType, scope, createdOn, ...) and
// RoleDefinition (properties roleName, type, description,
// assignableScopes, permissions).

var guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

const authzProvider = "/providers/Microsoft.Authorization/"

func (s *Server) serveAuthorization(w http.ResponseWriter, r *http.Request, op *operationSpec, body map[string]any) {
	path := strings.TrimRight(r.URL.Path, "/")
	i := strings.LastIndex(strings.ToLower(path), strings.ToLower(authzProvider))
	scope := path[:i]
	name := path[strings.LastIndex(path, "/")+1:]
	sub := strings.Split(strings.Trim(scope, "/"), "/")[1]
	switch op.ID {
	case "RoleDefinitions_Get":
		rd, ok := entra.RoleByID(name)
		if !ok {
			writeError(w, roleDefinitionMissing(name))
			return
		}
		writeJSON(w, http.StatusOK, renderRoleDefinition(sub, rd))
	case "RoleDefinitions_List":
		var items []any
		want := filterValue(r.URL.Query().Get("$filter"), "roleName")
		for _, rd := range entra.BuiltinRoles() {
			if want == "" || strings.EqualFold(want, rd.Name) {
				items = append(items, renderRoleDefinition(sub, rd))
			}
		}
		writeList(w, items)
	case "RoleAssignments_Create":
		s.createRoleAssignment(w, r, op, scope, name, sub, body)
	case "RoleAssignments_Get":
		a, ok := s.roleAssignment(scope, name)
		if !ok {
			writeError(w, errorf(http.StatusNotFound, "RoleAssignmentNotFound", "The role assignment '%s' is not found.", name))
			return
		}
		writeJSON(w, http.StatusOK, renderRoleAssignment(sub, a))
	case "RoleAssignments_Delete":
		a, ok := s.roleAssignment(scope, name)
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		s.opts.Directory.DeleteRoleAssignment(a.Name)
		writeJSON(w, http.StatusOK, renderRoleAssignment(sub, a))
	case "RoleAssignments_ListForScope":
		s.listRoleAssignments(w, r, scope, sub)
	}
}

func roleDefinitionMissing(id string) *armError {
	return errorf(http.StatusNotFound, "RoleDefinitionDoesNotExist", "The specified role definition with ID '%s' does not exist.", id)
}

// filterValue reads "<field> eq '<value>'" from an OData $filter.
func filterValue(filter, field string) string {
	lf := strings.ToLower(filter)
	i := strings.Index(lf, strings.ToLower(field)+" eq '")
	if i < 0 {
		return ""
	}
	rest := filter[i+len(field)+5:]
	if j := strings.Index(rest, "'"); j >= 0 {
		return rest[:j]
	}
	return ""
}

func (s *Server) createRoleAssignment(w http.ResponseWriter, r *http.Request, op *operationSpec, scope, name, sub string, body map[string]any) {
	// "The role assignment ID must be a GUID" (Azure/azure-rest-api-specs#1684,
	// Azure/azure-service-operator#2586).
	if !guidRE.MatchString(name) {
		writeError(w, errorf(http.StatusBadRequest, "InvalidRoleAssignmentId", "The role assignment ID '%s' is not valid. The role assignment ID must be a GUID.", name))
		return
	}
	p := obj(body, "properties")
	principal, defID := str(p, "principalId"), str(p, "roleDefinitionId")
	if !guidRE.MatchString(principal) {
		// Azure/azure-powershell#16627.
		writeError(w, errorf(http.StatusBadRequest, "InvalidPrincipalId", "The Principal ID '%s' is not valid. Principal ID must be a GUID.", principal))
		return
	}
	roleID := defID[strings.LastIndex(defID, "/")+1:]
	rd, ok := entra.RoleByID(roleID)
	if !ok {
		e := roleDefinitionMissing(roleID)
		e.Status = http.StatusBadRequest
		writeError(w, e)
		return
	}
	tenant := callerOf(r).TenantID
	// PrincipalNotFound names the principal without dashes, as Azure's
	// message does (Azure/avdaccelerator#76, Azure/HubAndSpokeResearchEnclave#50).
	notFound := errorf(http.StatusBadRequest, "PrincipalNotFound",
		"Principal %s does not exist in the directory %s. Check that you have the correct principal ID. If you are creating this principal and then immediately assigning a role, this error might be related to a replication delay. In this case, set the role assignment principalType property to a value, such as ServicePrincipal, User, or Group.  See https://aka.ms/docs-principaltype",
		strings.ReplaceAll(principal, "-", ""), tenant)
	if s.opts.Directory == nil {
		writeError(w, notFound)
		return
	}
	a, created, err := s.opts.Directory.CreateRoleAssignment(entra.RoleAssignment{
		Name: strings.ToLower(name), PrincipalID: principal, Role: rd.Name, Scope: scope, CreatedBy: callerOf(r).ObjectID,
	})
	switch {
	case errors.Is(err, entra.ErrPrincipalNotFound):
		writeError(w, notFound)
		return
	case errors.Is(err, entra.ErrRoleAssignmentExists):
		// {"code":"RoleAssignmentExists","message":"The role assignment
		// already exists."} (Azure-Samples/azure-search-openai-demo#1091).
		writeError(w, errorf(http.StatusConflict, "RoleAssignmentExists", "The role assignment already exists."))
		return
	case errors.Is(err, entra.ErrRoleAssignmentUpdate):
		// Azure/Enterprise-Scale#1747.
		writeError(w, errorf(http.StatusConflict, "RoleAssignmentUpdateNotPermitted", "Tenant ID, application ID, principal ID, and scope are not allowed to be updated."))
		return
	case err != nil:
		writeError(w, errorf(http.StatusInternalServerError, "InternalServerError", "%v", err))
		return
	}
	status := op.Updated
	if created {
		status = op.Created
	}
	writeJSON(w, status, renderRoleAssignment(sub, a))
}

// roleAssignment is the assignment of a name at exactly a scope.
func (s *Server) roleAssignment(scope, name string) (entra.RoleAssignment, bool) {
	if s.opts.Directory == nil {
		return entra.RoleAssignment{}, false
	}
	for _, a := range s.opts.Directory.RoleAssignments() {
		if strings.EqualFold(a.Name, name) && sameScope(a.Scope, scope) {
			return a, true
		}
	}
	return entra.RoleAssignment{}, false
}

func sameScope(a, b string) bool {
	return strings.EqualFold(strings.TrimRight(a, "/"), strings.TrimRight(b, "/"))
}

// within reports whether scope is inner or below it.
func within(scope, outer string) bool {
	s, o := strings.ToLower(strings.TrimRight(scope, "/")), strings.ToLower(strings.TrimRight(outer, "/"))
	return o == "" || s == o || strings.HasPrefix(s, o+"/")
}

// listRoleAssignments answers ListForScope as Azure does: the assignments
// at the scope, above it and below it; with $filter=atScope() those at it
// or above; with principalId eq '<id>' that principal's.
func (s *Server) listRoleAssignments(w http.ResponseWriter, r *http.Request, scope, sub string) {
	var items []any
	if s.opts.Directory != nil {
		filter := r.URL.Query().Get("$filter")
		atScope := strings.Contains(strings.ToLower(filter), "atscope()")
		principal := filterValue(filter, "principalId")
		for _, a := range s.opts.Directory.RoleAssignments() {
			above := within(scope, a.Scope)
			if !above && (atScope || !within(a.Scope, scope)) {
				continue
			}
			if principal != "" && !strings.EqualFold(principal, a.PrincipalID) {
				continue
			}
			items = append(items, renderRoleAssignment(sub, a))
		}
	}
	writeList(w, items)
}

func roleDefinitionID(sub, id string) string {
	return "/subscriptions/" + sub + "/providers/Microsoft.Authorization/roleDefinitions/" + id
}

func renderRoleAssignment(sub string, a entra.RoleAssignment) map[string]any {
	rd, _ := entra.RoleByName(a.Role)
	created := a.CreatedOn.UTC().Format(time.RFC3339Nano)
	return map[string]any{
		"id":   strings.TrimRight(a.Scope, "/") + "/providers/Microsoft.Authorization/roleAssignments/" + a.Name,
		"name": a.Name, "type": "Microsoft.Authorization/roleAssignments",
		"properties": map[string]any{
			"roleDefinitionId": roleDefinitionID(sub, rd.ID), "principalId": a.PrincipalID, "principalType": "ServicePrincipal",
			"scope": a.Scope, "createdOn": created, "updatedOn": created, "createdBy": a.CreatedBy, "updatedBy": a.CreatedBy,
		},
	}
}

func renderRoleDefinition(sub string, rd entra.RoleDefinition) map[string]any {
	notActions := rd.NotActions
	if notActions == nil {
		notActions = []string{}
	}
	return map[string]any{
		"id": roleDefinitionID(sub, rd.ID), "name": rd.ID, "type": "Microsoft.Authorization/roleDefinitions",
		"properties": map[string]any{
			"roleName": rd.Name, "type": "BuiltInRole", "description": rd.Description, "assignableScopes": []string{"/"},
			"permissions": []any{map[string]any{"actions": rd.Actions, "notActions": notActions, "dataActions": []string{}, "notDataActions": []string{}}},
		},
	}
}
