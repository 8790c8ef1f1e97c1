package networkinterfaces_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
)

func TestParameters(t *testing.T) {
	spec := networkinterfaces.Spec{ResourceGroup: "rg", Name: "vm-nic", Location: "westeurope", SubnetID: "/subnets/cp",
		BackendPoolIDs: []string{"/lb/backend"}, NatRuleIDs: []string{"/lb/nat/vm"}, IPForwarding: true}
	nic := func(state string) *armnetwork.Interface {
		return &armnetwork.Interface{Properties: &armnetwork.InterfacePropertiesFormat{ProvisioningState: to.Ptr(armnetwork.ProvisioningState(state))}}
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.Interface
		write    bool
	}{
		{"missing: created", nil, true},
		{"provisioned: left to its VM", nic("Succeeded"), false},
		{"failed: written again", nic("Failed"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if !azuretest.Writes(t, body, err, tc.write) {
				return
			}
			ipc := body.Properties.IPConfigurations[0].Properties
			if *ipc.Subnet.ID != "/subnets/cp" || *ipc.LoadBalancerBackendAddressPools[0].ID != "/lb/backend" || *ipc.LoadBalancerInboundNatRules[0].ID != "/lb/nat/vm" ||
				!*body.Properties.EnableIPForwarding || *body.Properties.EnableAcceleratedNetworking {
				t.Fatalf("body %+v / %+v", body.Properties, ipc)
			}
		})
	}
}
