package natgateways_test

import (
	"slices"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/natgateways"
)

func TestParameters(t *testing.T) {
	spec := natgateways.Spec{ResourceGroup: "rg", Name: "nat", Location: "westeurope", PublicIPID: "/ip/nat"}
	gw := func(state, ip string, idle int32) *armnetwork.NatGateway {
		return &armnetwork.NatGateway{Zones: []*string{to.Ptr("1")}, Properties: &armnetwork.NatGatewayPropertiesFormat{
			ProvisioningState:    to.Ptr(armnetwork.ProvisioningState(state)),
			PublicIPAddresses:    []*armnetwork.SubResource{{ID: to.Ptr(ip)}},
			IdleTimeoutInMinutes: to.Ptr(idle),
		}}
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.NatGateway
		// wantIdle is the idle timeout sent; 0 for none, -1 for no write.
		wantIdle int32
	}{
		{"missing: created", nil, 0},
		{"as wanted: no write", gw("Succeeded", "/ip/nat", 10), -1},
		{"another IP: the spec's added, keeping that IP and the idle timeout someone set", gw("Succeeded", "/ip/other", 10), 10},
		{"not provisioned: written again", gw("Failed", "/ip/nat", 4), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantIdle < 0 {
				if body != nil {
					t.Fatalf("a write of a gateway that is as wanted: %+v", body)
				}
				return
			}
			if body == nil {
				t.Fatal("no write")
			}
			var ips []string
			for _, ip := range body.Properties.PublicIPAddresses {
				ips = append(ips, *ip.ID)
			}
			if !slices.Contains(ips, "/ip/nat") {
				t.Fatalf("the spec's IP is not sent: %v", ips)
			}
			if tc.existing != nil && !slices.Contains(ips, *tc.existing.Properties.PublicIPAddresses[0].ID) {
				t.Fatalf("the gateway's IP %s was dropped: %v", *tc.existing.Properties.PublicIPAddresses[0].ID, ips)
			}
			if got := body.Properties.IdleTimeoutInMinutes; (tc.wantIdle == 0) != (got == nil) || (got != nil && *got != tc.wantIdle) {
				t.Fatalf("idle timeout %v, want %d", got, tc.wantIdle)
			}
			if tc.existing != nil && len(body.Zones) != 1 {
				t.Fatalf("the gateway's zones were dropped: %v", body.Zones)
			}
		})
	}
}
