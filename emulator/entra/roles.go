package entra

import (
	"sort"
	"strings"
)

// role is an Azure built-in role definition's permissions.
type role struct {
	actions, notActions []string
}

// builtinRoles are the general built-in roles with the permissions Azure
// documents for them.
var builtinRoles = map[string]role{
	"owner": {actions: []string{"*"}},
	"contributor": {actions: []string{"*"}, notActions: []string{
		"Microsoft.Authorization/*/Delete", "Microsoft.Authorization/*/Write", "Microsoft.Authorization/elevateAccess/Action",
		"Microsoft.Blueprint/blueprintAssignments/write", "Microsoft.Blueprint/blueprintAssignments/delete",
		"Microsoft.Compute/galleries/share/action", "Microsoft.Purview/consents/write", "Microsoft.Purview/consents/delete",
		"Microsoft.Resources/deploymentStacks/manageDenySetting/action", "Microsoft.Subscription/cancel/action", "Microsoft.Subscription/enable/action",
	}},
	"reader": {actions: []string{"*/read"}},
}

func roleByName(name string) (role, bool) {
	r, ok := builtinRoles[strings.ToLower(name)]
	return r, ok
}

func roleNames() []string {
	out := []string{"Owner", "Contributor", "Reader"}
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
		r, _ := roleByName(a.Role)
		if permits(r, action) {
			return true
		}
	}
	return false
}

func permits(r role, action string) bool {
	for _, n := range r.notActions {
		if matchAction(n, action) {
			return false
		}
	}
	for _, a := range r.actions {
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
