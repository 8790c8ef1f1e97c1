package tags_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

	"github.com/winkube/winkube/internal/azure/tags"
)

// A role fits a tag value however long the object's name (Kubernetes
// allows 253 characters): a short one is kind_namespace_name as before, a
// long one keeps its start and a hash, and two long names never share one.
func TestObjectRoleFitsATagValue(t *testing.T) {
	if got := tags.ObjectRole("machine", "default", "demo-md-0-abcde"); got != "machine_default_demo-md-0-abcde" {
		t.Fatalf("a short role changed: %s", got)
	}
	long := strings.Repeat("a", 240)
	a, b := tags.ObjectRole("machine", "team-namespace", long+"x"), tags.ObjectRole("machine", "team-namespace", long+"y")
	if len(a) > tags.MaxValueLength || len(b) > tags.MaxValueLength {
		t.Fatalf("roles of %d and %d characters", len(a), len(b))
	}
	if a == b || !strings.HasPrefix(a, "machine_team-namespace_aaa") {
		t.Fatalf("long roles %q and %q", a, b)
	}
}

// Ownership names the namespace too: a cluster of the same name in another
// namespace owns nothing of the first one's, and a resource tagged before
// namespaces were recorded is adopted only when the caller says the name
// is unambiguous.
func TestOwnershipNamesTheNamespace(t *testing.T) {
	a := tags.Owner{Cluster: "demo", Namespace: "team-a"}
	b := tags.Owner{Cluster: "demo", Namespace: "team-b"}
	have := tags.Build(a, "vnet", nil)
	if !a.Owns(have) || b.Owns(have) {
		t.Fatalf("team-a owns its resource: %v; team-b owns it: %v", a.Owns(have), b.Owns(have))
	}
	if err := tags.CheckOwned("VNet", "v", tags.Build(b, "vnet", nil), have, true); err == nil {
		t.Fatal("a same-named cluster of another namespace may write team-a's resource")
	}
	if err := tags.CheckOwned("VNet", "v", tags.Build(a, "vnet", nil), have, false); err != nil {
		t.Fatalf("team-a may not write its own resource: %v", err)
	}
	unscoped := tags.Build(tags.Owner{Cluster: "demo"}, "vnet", nil)
	if b.Owns(unscoped) {
		t.Fatal("an unscoped resource is adopted without AdoptUnscoped")
	}
	if err := tags.CheckOwned("VNet", "v", tags.Build(b, "vnet", nil), unscoped, false); err == nil {
		t.Fatal("an unscoped resource may be written without adoption")
	}
	b.AdoptUnscoped = true
	if !b.Owns(unscoped) || b.Owns(have) {
		t.Fatal("adoption takes unscoped resources only")
	}
	if err := tags.CheckOwned("VNet", "v", tags.Build(b, "vnet", nil), unscoped, true); err != nil {
		t.Fatalf("adoption refused: %v", err)
	}
}

// A cluster's identity tag keeps apart two clusters of one name in one
// namespace (two management clusters): a resource tagged with another
// identity is not the owner's and is refused; one tagged before identity
// tags existed is adopted by name and namespace (the migration), and the
// owner's next write tags it.
func TestOwnerUID(t *testing.T) {
	o := tags.Owner{Cluster: "prod", Namespace: "default", UID: "uid-b"}
	mine := tags.Build(o, "vnet", nil)
	if v := mine[tags.UIDKey("prod")]; v == nil || *v != "uid-b" {
		t.Fatalf("Build writes no identity tag: %v", mine)
	}
	theirs := tags.Build(tags.Owner{Cluster: "prod", Namespace: "default", UID: "uid-a"}, "vnet", nil)
	older := tags.Build(tags.Owner{Cluster: "prod", Namespace: "default"}, "vnet", nil)
	if o.Owns(theirs) || !o.Owns(mine) || !o.Owns(older) {
		t.Fatalf("Owns: another identity's %v, its own %v, untagged %v", o.Owns(theirs), o.Owns(mine), o.Owns(older))
	}
	err := tags.CheckOwned("resource group", "prod", mine, theirs, false)
	var e *tags.NotOwnedError
	if !errors.As(err, &e) || e.UID != "uid-a" || !strings.Contains(err.Error(), tags.ClusterUIDAnnotation) {
		t.Fatalf("another identity's group: %v", err)
	}
	if err := tags.CheckOwned("resource group", "prod", mine, older, false); err != nil {
		t.Fatalf("a group tagged before identity tags is refused: %v", err)
	}
}

// A resource another winkube cluster owns is foreign to every other
// owner, whatever its name or namespace; one without winkube's tags (a
// user's) and the owner's own are not.
func TestForeignIsAnotherClustersResource(t *testing.T) {
	o := tags.Owner{Cluster: "evil", Namespace: "team-e"}
	for name, c := range map[string]struct {
		t    map[string]*string
		want bool
	}{
		"another cluster's":                       {tags.Build(tags.Owner{Cluster: "victim", Namespace: "team-v", UID: "u"}, "", nil), true},
		"another cluster's, unscoped":             {tags.Build(tags.Owner{Cluster: "victim"}, "", nil), true},
		"another cluster's, tag name in capitals": {map[string]*string{"Winkube.dev_Cluster_victim": to.Ptr("Owned")}, true},
		"a same-named cluster's of another team":  {tags.Build(tags.Owner{Cluster: "evil", Namespace: "team-v"}, "", nil), true},
		"its own":                                 {tags.Build(o, "", nil), false},
		"its own, and a user's tags":              {tags.Build(o, "", map[string]string{"env": "prod"}), false},
		"a user's":                                {map[string]*string{"env": to.Ptr("prod")}, false},
		"untagged":                                {nil, false},
		"another cluster's, no longer owned":      {map[string]*string{tags.ClusterKey("victim"): to.Ptr("shared")}, false},
	} {
		if got := o.Foreign(c.t); got != c.want {
			t.Errorf("%s: Foreign = %v, want %v", name, got, c.want)
		}
	}
	err := error(&tags.NotOwnedError{Kind: "resource group", Name: "rg-v", Cluster: "evil", Foreign: true})
	if msg := err.Error(); !strings.Contains(msg, "another winkube cluster") || strings.Contains(msg, "victim") {
		t.Errorf("the refusal does not say why, or names the other cluster: %s", msg)
	}
}
