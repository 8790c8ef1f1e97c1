package providerid

import "testing"

func TestFromARMIDLowersOnlyTheResourceGroup(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"/subscriptions/0000-AB/resourceGroups/Prod-West/providers/Microsoft.Compute/virtualMachines/Worker-1",
			"azure:///subscriptions/0000-AB/resourceGroups/prod-west/providers/Microsoft.Compute/virtualMachines/Worker-1"},
		{"/subscriptions/s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/Pool/virtualMachines/3",
			"azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/Pool/virtualMachines/3"},
		{"/subscriptions/s/resourceGroups/lower/providers/Microsoft.Compute/virtualMachines/vm",
			"azure:///subscriptions/s/resourceGroups/lower/providers/Microsoft.Compute/virtualMachines/vm"},
	} {
		if got := FromARMID(tc.id); got != tc.want {
			t.Errorf("FromARMID(%s) = %s, want %s", tc.id, got, tc.want)
		}
		if got := Normalize("azure://" + tc.id); got != tc.want {
			t.Errorf("Normalize(azure://%s) = %s, want %s", tc.id, got, tc.want)
		}
	}
	if got := Normalize("kind://docker/x"); got != "kind://docker/x" {
		t.Errorf("a foreign provider ID changed: %s", got)
	}
}
