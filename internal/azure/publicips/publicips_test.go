package publicips_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/publicips"
)

func TestParameters(t *testing.T) {
	spec := publicips.Spec{ResourceGroup: "rg", Name: "api", Location: "westeurope", DNSLabel: "demo-1a2b3c4d"}
	ip := func(state, label string) *armnetwork.PublicIPAddress {
		return &armnetwork.PublicIPAddress{Properties: &armnetwork.PublicIPAddressPropertiesFormat{
			ProvisioningState: to.Ptr(armnetwork.ProvisioningState(state)),
			DNSSettings:       &armnetwork.PublicIPAddressDNSSettings{DomainNameLabel: to.Ptr(label)},
		}}
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.PublicIPAddress
		write    bool
	}{
		{"missing: created", nil, true},
		{"provisioned: never changed, also with another label", ip("Succeeded", "other"), false},
		{"failed: written again", ip("Failed", "demo-1a2b3c4d"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if !azuretest.Writes(t, body, err, tc.write) {
				return
			}
			if *body.SKU.Name != armnetwork.PublicIPAddressSKUNameStandard || *body.Properties.PublicIPAllocationMethod != armnetwork.IPAllocationMethodStatic ||
				*body.Properties.DNSSettings.DomainNameLabel != "demo-1a2b3c4d" {
				t.Fatalf("body %+v", body.Properties)
			}
		})
	}
}
