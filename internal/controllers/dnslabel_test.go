package controllers

import (
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
