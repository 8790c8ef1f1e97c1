package cloudprovider

import "testing"

// The node manager composes the provider ID from the instance metadata
// with the subscription and the group in lower case, whatever case Azure
// keeps them in; the scale set keeps its own.
func TestProviderIDLowersTheGroup(t *testing.T) {
	for _, tc := range []struct {
		md   Metadata
		want string
	}{
		{Metadata{SubscriptionID: "0000-AB", ResourceGroup: "E2E-Group", Name: "cp-0"},
			"azure:///subscriptions/0000-ab/resourceGroups/e2e-group/providers/Microsoft.Compute/virtualMachines/cp-0"},
		{Metadata{SubscriptionID: "s", ResourceGroup: "RG", Name: "Pool_3", ScaleSet: "Pool", InstanceID: "3"},
			"azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/Pool/virtualMachines/3"},
	} {
		if got := ProviderID(tc.md); got != tc.want {
			t.Errorf("ProviderID(%+v) = %s, want %s", tc.md, got, tc.want)
		}
	}
}
