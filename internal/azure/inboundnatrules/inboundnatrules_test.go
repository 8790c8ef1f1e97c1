package inboundnatrules_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/inboundnatrules"
)

func TestParameters(t *testing.T) {
	spec := inboundnatrules.Spec{ResourceGroup: "rg", LoadBalancer: "lb", Name: "cp-0", FrontendID: "/lb/frontend", Port: 2201}
	rule := func(state string, port int32) *armnetwork.InboundNatRule {
		return &armnetwork.InboundNatRule{Properties: &armnetwork.InboundNatRulePropertiesFormat{
			ProvisioningState: to.Ptr(armnetwork.ProvisioningState(state)), FrontendPort: to.Ptr(port)}}
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.InboundNatRule
		write    bool
	}{
		{"missing: created on the spec's port", nil, true},
		{"provisioned on another port: kept, so SSH keeps working", rule("Succeeded", 22), false},
		{"failed: written again", rule("Failed", 2201), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if azuretest.Writes(t, body, err, tc.write) && (*body.Properties.FrontendPort != 2201 || *body.Properties.BackendPort != 22 || *body.Properties.FrontendIPConfiguration.ID != "/lb/frontend") {
				t.Fatalf("body %+v", body.Properties)
			}
		})
	}
	if ref := spec.ResourceRef(); ref.Parent != "lb" || ref.Name != "cp-0" {
		t.Fatalf("a rule is a child of its load balancer: %+v", ref)
	}
}

func TestFreePort(t *testing.T) {
	for _, tc := range []struct {
		used map[string]int32
		want int32
	}{
		{nil, 22},
		{map[string]int32{"cp-0": 22}, 2201},
		{map[string]int32{"cp-0": 22, "cp-1": 2201, "cp-2": 2203}, 2202},
	} {
		if got, err := inboundnatrules.FreePort(tc.used); err != nil || got != tc.want {
			t.Errorf("FreePort(%v) = %d, %v; want %d", tc.used, got, err, tc.want)
		}
	}
}
