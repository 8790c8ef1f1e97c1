package doctor

import (
	"fmt"
	"testing"
)

// The order doctor, plan upgrade and plan windows-upgrade print findings in:
// the most severe first, each check's own order kept within a severity.
func TestSortFindingsMostSevereFirstKeepingOrder(t *testing.T) {
	fs := []Finding{
		{Check: "a", Severity: Info}, {Check: "b", Severity: Warning}, {Check: "c", Severity: Error},
		{Check: "d", Severity: Warning}, {Check: "e", Severity: Info}, {Check: "f", Severity: Error},
	}
	SortFindings(fs)
	var got string
	for _, f := range fs {
		got += fmt.Sprintf("%s:%s ", f.Check, f.Severity)
	}
	if want := "c:error f:error b:warning d:warning a:info e:info "; got != want {
		t.Errorf("sorted %q, want %q", got, want)
	}
}
