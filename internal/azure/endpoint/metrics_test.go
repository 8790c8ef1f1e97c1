package endpoint

import "testing"

func TestKind(t *testing.T) {
	for path, want := range map[string]string{
		"/subscriptions/s/resourceGroups/rg": "resourceGroups",
		"/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/a": "subnets",
		"/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm":          "virtualMachines",
		"/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines":             "virtualMachines",
		"/subscriptions/s/providers/Microsoft.Network/locations/westeurope/operations/1":             "operations",
		"/subscriptions/s/providers/Microsoft.Compute/skus":                                          "skus",
	} {
		if got := Kind(path); got != want {
			t.Errorf("Kind(%s) = %s, want %s", path, got, want)
		}
	}
}
