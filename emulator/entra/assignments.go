package entra

import (
	"errors"
	"strings"
	"time"
)

// Why CreateRoleAssignment refuses an assignment; ARM answers each with
// its own code (emulator/arm/authorization.go).
var (
	// ErrPrincipalNotFound: no principal of the directory has the object ID.
	ErrPrincipalNotFound = errors.New("principal not found")
	// ErrRoleAssignmentExists: the same principal holds the same role at
	// the same scope under another name.
	ErrRoleAssignmentExists = errors.New("role assignment exists")
	// ErrRoleAssignmentUpdate: an assignment of that name grants something
	// else; Azure does not change an assignment in place.
	ErrRoleAssignmentUpdate = errors.New("role assignment update not permitted")
)

func sameGrant(a, b RoleAssignment) bool {
	return strings.EqualFold(a.PrincipalID, b.PrincipalID) && strings.EqualFold(a.Role, b.Role) &&
		strings.EqualFold(strings.TrimRight(a.Scope, "/"), strings.TrimRight(b.Scope, "/"))
}

// CreateRoleAssignment records a named assignment as ARM's PUT of a
// roleAssignment does, and returns it with created false when the same
// assignment already had that name.
func (d *Directory) CreateRoleAssignment(a RoleAssignment) (RoleAssignment, bool, error) {
	defer d.changed()
	r, ok := RoleByName(a.Role)
	if !ok {
		return RoleAssignment{}, false, errors.New("unknown role " + a.Role)
	}
	a.Role = r.Name
	if _, found := d.PrincipalByObjectID(a.PrincipalID); !found {
		return RoleAssignment{}, false, ErrPrincipalNotFound
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.assignments {
		if strings.EqualFold(x.Name, a.Name) {
			if sameGrant(x, a) {
				return x, false, nil
			}
			return RoleAssignment{}, false, ErrRoleAssignmentUpdate
		}
	}
	for _, x := range d.assignments {
		if sameGrant(x, a) {
			return RoleAssignment{}, false, ErrRoleAssignmentExists
		}
	}
	if a.CreatedOn.IsZero() {
		a.CreatedOn = time.Now().UTC()
	}
	d.assignments = append(d.assignments, a)
	return a, true, nil
}

// RoleAssignments are every assignment of the directory.
func (d *Directory) RoleAssignments() []RoleAssignment {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]RoleAssignment(nil), d.assignments...)
}

// DeleteRoleAssignment removes the assignment of a name and returns it.
func (d *Directory) DeleteRoleAssignment(name string) (RoleAssignment, bool) {
	defer d.changed()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.assignments {
		if strings.EqualFold(x.Name, name) {
			d.assignments = append(d.assignments[:i:i], d.assignments[i+1:]...)
			return x, true
		}
	}
	return RoleAssignment{}, false
}

// PrincipalByObjectID finds a principal by its object ID (the principalId
// of role assignments).
func (d *Directory) PrincipalByObjectID(objectID string) (Principal, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.principals {
		if strings.EqualFold(p.ObjectID, objectID) {
			return *p, true
		}
	}
	return Principal{}, false
}

// RemovePrincipal deletes a principal, as deleting a managed identity's
// resource does; its role assignments stay, orphaned, as on Azure.
func (d *Directory) RemovePrincipal(clientID string) bool {
	defer d.changed()
	d.mu.Lock()
	defer d.mu.Unlock()
	k := strings.ToLower(clientID)
	_, ok := d.principals[k]
	delete(d.principals, k)
	return ok
}

// ManagedIdentityIssuer is the authority of the tokens the Instance
// Metadata Service hands out: Entra's v1.0 issuer, as in the iss claim of
// Azure's own managed-identity tokens (https://sts.windows.net/<tenant>/).
const ManagedIdentityIssuer = "https://sts.windows.net"

// IssueManagedIdentityToken signs an access token for a managed identity
// (a principal of kind ManagedIdentity) and a resource, as IMDS obtains
// one from Entra for a VM's identity.
func (d *Directory) IssueManagedIdentityToken(clientID, resource string) (string, time.Time, error) {
	d.countRequest(clientID)
	p, ok := d.Principal(clientID)
	if !ok || p.Kind != ManagedIdentity {
		d.recordOutcome(clientID, 400)
		return "", time.Time{}, ErrPrincipalNotFound
	}
	return d.issue(ManagedIdentityIssuer, p, resource, "2")
}
