package arm

import (
	"fmt"
	"strings"
)

// resourceID is a parsed ARM resource ID:
// /subscriptions/S/resourceGroups/G/providers/NS/T1/N1[/T2/N2...].
type resourceID struct {
	Subscription  string
	ResourceGroup string
	Namespace     string
	// Types and Names pair up; len(Names) is len(Types) or one less when
	// the ID names a collection.
	Types []string
	Names []string
}

// parseResourcePath splits an URL path into an ID. ok is false when the path
// is not under a resource group's provider.
func parseResourcePath(path string) (resourceID, bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) < 6 || !strings.EqualFold(seg[0], "subscriptions") || !strings.EqualFold(seg[2], "resourceGroups") || !strings.EqualFold(seg[4], "providers") {
		return resourceID{}, false
	}
	id := resourceID{Subscription: seg[1], ResourceGroup: seg[3], Namespace: seg[5]}
	rest := seg[6:]
	for i := 0; i < len(rest); i += 2 {
		id.Types = append(id.Types, rest[i])
		if i+1 < len(rest) {
			id.Names = append(id.Names, rest[i+1])
		}
	}
	return id, len(id.Types) > 0
}

// IsCollection reports whether the ID names a list rather than a resource.
func (id resourceID) IsCollection() bool { return len(id.Names) < len(id.Types) }

// Kind is the resource type without names, for the kind table and counters:
// "Microsoft.Network/virtualNetworks/subnets".
func (id resourceID) Kind() string {
	return id.Namespace + "/" + strings.Join(id.Types, "/")
}

// Name is the last name of the ID.
func (id resourceID) Name() string {
	if len(id.Names) == 0 {
		return ""
	}
	return id.Names[len(id.Names)-1]
}

// String renders the ID of the resource (or collection).
func (id resourceID) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "/subscriptions/%s/resourceGroups/%s/providers/%s", id.Subscription, id.ResourceGroup, id.Namespace)
	for i, t := range id.Types {
		b.WriteString("/" + t)
		if i < len(id.Names) {
			b.WriteString("/" + id.Names[i])
		}
	}
	return b.String()
}

// Parent is the ID of the enclosing resource (a subnet's VNet).
func (id resourceID) Parent() (resourceID, bool) {
	if len(id.Names) < 2 {
		return resourceID{}, false
	}
	p := id
	p.Types = append([]string(nil), id.Types[:len(id.Names)-1]...)
	p.Names = append([]string(nil), id.Names[:len(id.Names)-1]...)
	return p, true
}

// Child is the ID of a child resource.
func (id resourceID) Child(typ, name string) resourceID {
	c := id
	c.Types = append(append([]string(nil), id.Types...), typ)
	c.Names = append(append([]string(nil), id.Names...), name)
	return c
}

func key(id string) string { return strings.ToLower(id) }

func rgKey(sub, rg string) string {
	return key("/subscriptions/" + sub + "/resourceGroups/" + rg)
}
