package subnets_test

import (
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/subnets"
	"github.com/winkube/winkube/internal/azure/vnets"
)

func TestParameters(t *testing.T) {
	sn := vnets.Subnet{Name: "demo-node-subnet", CIDRs: []string{"10.1.0.0/16"}, NSGID: "/nsg/node", RouteTableID: "/rt/node"}
	existing := func(prefix string) *armnetwork.Subnet {
		return &armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{
			ProvisioningState: to.Ptr(armnetwork.ProvisioningStateSucceeded), AddressPrefix: to.Ptr(prefix),
			NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: to.Ptr("/nsg/node")}, RouteTable: &armnetwork.RouteTable{ID: to.Ptr("/rt/node")},
			// What someone else set on the subnet.
			ServiceEndpoints: []*armnetwork.ServiceEndpointPropertiesFormat{{Service: to.Ptr("Microsoft.Storage")}},
		}}
	}
	for _, tc := range []struct {
		name     string
		created  bool
		existing *armnetwork.Subnet
		write    bool
		exists   bool
	}{
		{"missing: created", false, nil, true, false},
		{"exists, not the caller's: refused", false, existing("10.1.0.0/16"), false, true},
		{"the caller's, as wanted: no write", true, existing("10.1.0.0/16"), false, false},
		{"the caller's, another prefix: the spec's, keeping its service endpoints", true, existing("10.9.0.0/16"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := subnets.Spec{ResourceGroup: "rg", VNet: "vnet", Subnet: sn, Created: tc.created}
			body, err := spec.Parameters(tc.existing)
			var ee *subnets.ExistsError
			if got := errors.As(err, &ee); got != tc.exists {
				t.Fatalf("ExistsError %v, want %v (%v)", got, tc.exists, err)
			}
			if (body != nil) != tc.write {
				t.Fatalf("write %v, want %v", body != nil, tc.write)
			}
			if body == nil {
				return
			}
			if *body.Properties.AddressPrefix != "10.1.0.0/16" || *body.Properties.RouteTable.ID != "/rt/node" {
				t.Fatalf("body %+v", body.Properties)
			}
			if tc.existing != nil && len(body.Properties.ServiceEndpoints) != 1 {
				t.Fatal("the service endpoint someone set was dropped")
			}
		})
	}
	if !(subnets.Spec{}).ExclusiveCreate() {
		t.Fatal("a subnet made between the read and the create would become the cluster's")
	}
}
