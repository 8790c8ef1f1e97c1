package controllers

import (
	"testing"

	"k8s.io/utils/ptr"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// TestARMIDsAreArmID: the IDs the controllers give Azure are armID's,
// the form the emulator and Azure answer with.
func TestARMIDsAreArmID(t *testing.T) {
	for got, want := range map[string]string{
		resourceGroupID("sub", "rg"): "/subscriptions/sub/resourceGroups/rg",
		armID("sub", "rg", "Microsoft.Network", "virtualNetworks", "vnet", "subnets", "node"):                                                                                              "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/node",
		vmImage(&infrav1.Image{ComputeGallery: &infrav1.ComputeGalleryImage{Gallery: "g", Name: "win", Version: "1.31.1", SubscriptionID: ptr.To("sub"), ResourceGroup: ptr.To("rg")}}).ID: "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/win/versions/1.31.1",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if m := mergeMaps(map[string]string{"a": "cluster", "b": "cluster"}, map[string]string{"b": "machine"}); len(m) != 2 || m["a"] != "cluster" || m["b"] != "machine" {
		t.Errorf("mergeMaps: %v, want the second map's value where both have a key", m)
	}
}
