package roleassignments_test

import (
	"regexp"
	"testing"

	"github.com/winkube/winkube/internal/azure/roleassignments"
)

// An assignment's name is a GUID Azure accepts, the same for the same
// principal, role and scope, and another for anything else.
func TestNamesAreStableGUIDs(t *testing.T) {
	guid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	def := roleassignments.DefinitionID("sub", roleassignments.ContributorRole)
	if def != "/subscriptions/sub/providers/Microsoft.Authorization/roleDefinitions/b24988ac-6180-42a0-ab88-20f7382dd24c" {
		t.Fatalf("Contributor's definition ID: %s", def)
	}
	if full := "/providers/Microsoft.Authorization/roleDefinitions/x"; roleassignments.DefinitionID("sub", full) != full {
		t.Error("a full definition ID is not kept")
	}
	a := roleassignments.Name("p1", def, "/subscriptions/sub/resourceGroups/rg")
	if !guid.MatchString(a) {
		t.Fatalf("name %q is not a GUID", a)
	}
	if roleassignments.Name("P1", def, "/subscriptions/sub/resourceGroups/RG") != a {
		t.Error("the name depends on the case of IDs Azure compares without it")
	}
	for _, other := range []string{
		roleassignments.Name("p2", def, "/subscriptions/sub/resourceGroups/rg"),
		roleassignments.Name("p1", def, "/subscriptions/sub"),
		roleassignments.Name("p1", roleassignments.DefinitionID("sub", "acdd72a7-3c48-4d14-a5c5-a8e2a1d8a3f0"), "/subscriptions/sub/resourceGroups/rg"),
	} {
		if other == a {
			t.Errorf("two different assignments share the name %s", a)
		}
	}
	if id := roleassignments.ID("/subscriptions/sub/resourceGroups/rg/", a); id != "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Authorization/roleAssignments/"+a {
		t.Errorf("ID %s", id)
	}
}
