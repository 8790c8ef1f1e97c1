package entra

import (
	"sort"
	"strings"
)

// RoleDefinition is an Azure built-in role: its name, the GUID Azure gives
// it in every tenant, and its permissions.
type RoleDefinition struct {
	ID, Name, Description string
	Actions, NotActions   []string
}

// builtinRoles are the built-in roles the directory knows, with the IDs
// and permissions Microsoft lists on "Azure built-in roles"
// (learn.microsoft.com/azure/role-based-access-control/built-in-roles:
// Owner 8e3af657-..., Contributor b24988ac-..., Reader acdd72a7-..., User
// Access Administrator 18d7d88d-..., Network Contributor 4d97b98b-...).
var builtinRoles = []RoleDefinition{
	{ID: "8e3af657-a8ff-443c-a75c-2fe8c4bcb635", Name: "Owner",
		Description: "Grants full access to manage all resources, including the ability to assign roles in Azure RBAC.",
		Actions:     []string{"*"}},
	{ID: "b24988ac-6180-42a0-ab88-20f7382dd24c", Name: "Contributor",
		Description: "Grants full access to manage all resources, but does not allow you to assign roles in Azure RBAC, manage assignments in Azure Blueprints, or share image galleries.",
		Actions:     []string{"*"}, NotActions: []string{
			"Microsoft.Authorization/*/Delete", "Microsoft.Authorization/*/Write", "Microsoft.Authorization/elevateAccess/Action",
			"Microsoft.Blueprint/blueprintAssignments/write", "Microsoft.Blueprint/blueprintAssignments/delete",
			"Microsoft.Compute/galleries/share/action", "Microsoft.Purview/consents/write", "Microsoft.Purview/consents/delete",
			"Microsoft.Resources/deploymentStacks/manageDenySetting/action", "Microsoft.Subscription/cancel/action", "Microsoft.Subscription/enable/action",
		}},
	{ID: "acdd72a7-3385-48ef-bd42-f606fba81ae7", Name: "Reader",
		Description: "View all resources, but does not allow you to make any changes.",
		Actions:     []string{"*/read"}},
	{ID: "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9", Name: "User Access Administrator",
		Description: "Lets you manage user access to Azure resources.",
		Actions:     []string{"*/read", "Microsoft.Authorization/*", "Microsoft.Support/*"}},
	{ID: "4d97b98b-1d4f-4787-a291-c67834d212e7", Name: "Network Contributor",
		Description: "Lets you manage networks, but not access to them.",
		Actions: []string{"Microsoft.Authorization/*/read", "Microsoft.Insights/alertRules/*", "Microsoft.Network/*",
			"Microsoft.ResourceHealth/availabilityStatuses/read", "Microsoft.Resources/deployments/*",
			"Microsoft.Resources/subscriptions/resourceGroups/read", "Microsoft.Support/*"}},
}

// BuiltinRoles are the built-in role definitions the directory knows.
func BuiltinRoles() []RoleDefinition {
	out := make([]RoleDefinition, len(builtinRoles))
	copy(out, builtinRoles)
	return out
}

// RoleByName finds a built-in role by its name, without case.
func RoleByName(name string) (RoleDefinition, bool) {
	for _, r := range builtinRoles {
		if strings.EqualFold(r.Name, name) {
			return r, true
		}
	}
	return RoleDefinition{}, false
}

// RoleByID finds a built-in role by its GUID.
func RoleByID(id string) (RoleDefinition, bool) {
	for _, r := range builtinRoles {
		if strings.EqualFold(r.ID, id) {
			return r, true
		}
	}
	return RoleDefinition{}, false
}

func roleNames() []string {
	out := make([]string, 0, len(builtinRoles))
	for _, r := range builtinRoles {
		out = append(out, r.Name)
	}
	sort.Strings(out)
	return out
}

// Authorized says whether a principal holds a role assignment at the scope
// (or above it) whose role permits the action.
func (d *Directory) Authorized(objectID, action, scope string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	scope = strings.ToLower(strings.TrimRight(scope, "/"))
	for _, a := range d.assignments {
		if !strings.EqualFold(a.PrincipalID, objectID) {
			continue
		}
		as := strings.ToLower(strings.TrimRight(a.Scope, "/"))
		if as != "" && scope != as && !strings.HasPrefix(scope, as+"/") {
			continue
		}
		r, _ := RoleByName(a.Role)
		if permits(r, action) {
			return true
		}
	}
	return false
}

func permits(r RoleDefinition, action string) bool {
	for _, n := range r.NotActions {
		if matchAction(n, action) {
			return false
		}
	}
	for _, a := range r.Actions {
		if matchAction(a, action) {
			return true
		}
	}
	return false
}

// matchAction matches an action against a permission pattern, where *
// stands for any characters (slashes included), case-insensitively.
func matchAction(pattern, action string) bool {
	p, a := strings.ToLower(pattern), strings.ToLower(action)
	parts := strings.Split(p, "*")
	if len(parts) == 1 {
		return p == a
	}
	if !strings.HasPrefix(a, parts[0]) {
		return false
	}
	a = a[len(parts[0]):]
	for i, part := range parts[1:] {
		last := i == len(parts)-2
		if last {
			return strings.HasSuffix(a, part)
		}
		j := strings.Index(a, part)
		if j < 0 {
			return false
		}
		a = a[j+len(part):]
	}
	return true
}
