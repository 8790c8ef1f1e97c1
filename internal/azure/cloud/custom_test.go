package cloud

import (
	"strings"
	"testing"
)

func TestCustomCloudMatchesOnlyItsOwnHosts(t *testing.T) {
	c := CustomCloud{Name: "stack", ResourceManagerEndpoint: "https://management.local.azurestack.external", AuthorityHost: "https://login.local.azurestack.external:8443/"}
	for _, m := range []struct {
		arm, entra string
		want       bool
	}{
		{"https://management.local.azurestack.external/", "https://LOGIN.local.azurestack.external:8443", true},
		{"https://management.local.azurestack.external", "https://login.local.azurestack.external", false},
		{"https://management.local.azurestack.external", "https://login.local.azurestack.external:8443@evil.example", false},
		{"https://management.local.azurestack.external", "https://evil.example/login.local.azurestack.external:8443", false},
		{"https://management.local.azurestack.external", "https://login.local.azurestack.external:8443/?x=1", false},
		{"http://management.local.azurestack.external", "https://login.local.azurestack.external:8443", false},
		{"https://management.local.azurestack.external.evil.example", "https://login.local.azurestack.external:8443", false},
	} {
		if got := c.Matches(m.arm, m.entra); got != m.want {
			t.Errorf("Matches(%s, %s) = %v, want %v", m.arm, m.entra, got, m.want)
		}
	}
}

func TestParseCustomCloud(t *testing.T) {
	c, ca, err := ParseCustomCloud("name=stack,arm=https://management.local,entra=https://login.local,ca-file=/etc/stack/ca.pem")
	if err != nil || c.Name != "stack" || c.ResourceManagerEndpoint != "https://management.local" || c.AuthorityHost != "https://login.local" || ca != "/etc/stack/ca.pem" {
		t.Fatalf("got %+v %q %v", c, ca, err)
	}
	for v, want := range map[string]string{
		"arm=https://a,entra=https://b":                  "name=NAME",
		"name=x,arm=http://a,entra=https://b":            "arm=",
		"name=x,arm=https://a,entra=https://u@b":         "entra=",
		"name=x,arm=https://a,entra=https://b,cafile=/x": `unknown key "cafile"`,
		"name=x,arm": "name=NAME,arm=URL",
	} {
		if _, _, err := ParseCustomCloud(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCustomCloud(%q): %v, want %q", v, err, want)
		}
	}
}
