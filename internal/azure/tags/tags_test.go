package tags_test

import (
	"strings"
	"testing"

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
