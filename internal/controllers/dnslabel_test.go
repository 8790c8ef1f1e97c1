package controllers

import (
	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"regexp"
	"strings"
	"testing"
)

// Azure's rule for a label, as its InvalidDomainNameLabel answer states it.
var azureLabel = regexp.MustCompile(`^[a-z][a-z0-9-]{1,61}[a-z0-9]$`)

func TestAPIServerDNSLabelIsUniqueAndValid(t *testing.T) {
	for _, c := range []string{"demo", "c", "Demo-Cluster", strings.Repeat("long-name-", 7)} {
		l := apiServerDNSLabel("sub", "rg", c)
		if !azureLabel.MatchString(l) {
			t.Errorf("label %q for cluster %q breaks Azure's rule", l, c)
		}
		if l != apiServerDNSLabel("sub", "rg", c) {
			t.Errorf("label for %q changes between reconciles", c)
		}
	}
	if apiServerDNSLabel("sub", "rg-a", "demo") == apiServerDNSLabel("sub", "rg-b", "demo") {
		t.Error("two clusters named demo in different groups ask for the same label")
	}
	if l := apiServerDNSLabel("sub", "rg", "demo"); l == "demo" {
		t.Error("the label is the bare cluster name")
	}
}

// A resume token is resumed only by an operation of its own kind: a create
// under way is not polled as if it were the delete.
func TestTokenOfAnotherKindIsNotResumed(t *testing.T) {
	var f infrav1.Futures
	s := step{"virtualmachines", "vm-1"}
	record(&f, s, "rg", "PUT", "create-token")
	if got := token(f, s, "DELETE"); got != "" {
		t.Errorf("the delete resumed %q, the create's token", got)
	}
	if got := token(f, s, "PUT"); got != "create-token" {
		t.Errorf("the create's token: %q", got)
	}
	record(&f, s, "rg", "DELETE", "delete-token")
	if got := token(f, s, "PUT"); got != "" || len(f) != 1 {
		t.Errorf("after the delete started: PUT token %q, %d futures", got, len(f))
	}
}
