package vnets_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vnets"
)

// A subnet added to the cluster's VNet by someone else, and what others set
// on the cluster's own subnets, survive reconciles that change the VNet.
func TestReconcileKeepsSubnetsItDoesNotOwn(t *testing.T) {
	cfg := azuretest.Start(t, "rg")
	svc, err := vnets.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	subnets, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSubnetsClient)
	ctx := context.Background()
	spec := vnets.Spec{ResourceGroup: "rg", Name: "vnet", Location: azuretest.Location, CIDRs: []string{"10.0.0.0/8"},
		Subnets: []vnets.Subnet{{Name: "cp", CIDRs: []string{"10.0.0.0/16"}}, {Name: "nodes", CIDRs: []string{"10.1.0.0/16"}}}}
	reconcile := func() {
		t.Helper()
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	p, err := subnets.BeginCreateOrUpdate(ctx, "rg", "vnet", "bastion", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.2.0.0/24")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	p, err = subnets.BeginCreateOrUpdate(ctx, "rg", "vnet", "nodes", armnetwork.Subnet{Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.1.0.0/16"),
		DefaultOutboundAccess: to.Ptr(false)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}

	spec.CIDRs = []string{"10.0.0.0/8", "192.168.0.0/16"}
	spec.Subnets = append(spec.Subnets, vnets.Subnet{Name: "windows", CIDRs: []string{"192.168.0.0/24"}})
	reconcile()
	v, err := svc.Get(ctx, "rg", "vnet")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*armnetwork.Subnet{}
	for _, sn := range v.Properties.Subnets {
		got[*sn.Name] = sn
	}
	if got["bastion"] == nil || got["windows"] == nil || len(got) != 4 {
		t.Errorf("subnets after the reconcile: %v", keys(got))
	}
	if n := got["nodes"]; n == nil || n.Properties.DefaultOutboundAccess == nil || *n.Properties.DefaultOutboundAccess {
		t.Error("a setting someone else made on the nodes subnet was dropped")
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestParameters(t *testing.T) {
	spec := vnets.Spec{ResourceGroup: "rg", Name: "vnet", Location: "westeurope", CIDRs: []string{"10.0.0.0/12"},
		Subnets: []vnets.Subnet{{Name: "cp", CIDRs: []string{"10.0.0.0/16"}, NSGID: "/nsg/cp"}}}
	made, err := spec.Parameters(nil)
	if err != nil || made == nil {
		t.Fatalf("a missing VNet is not created: %v", err)
	}
	with := func(state string, change func(*armnetwork.VirtualNetwork)) *armnetwork.VirtualNetwork {
		v := vnets.Merged(spec, nil)
		v.Properties.ProvisioningState = to.Ptr(armnetwork.ProvisioningState(state))
		change(&v)
		return &v
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.VirtualNetwork
		write    bool
	}{
		{"as wanted", with("Succeeded", func(*armnetwork.VirtualNetwork) {}), false},
		{"as wanted, with a subnet of someone else's", with("Succeeded", func(v *armnetwork.VirtualNetwork) {
			v.Properties.Subnets = append(v.Properties.Subnets, &armnetwork.Subnet{Name: to.Ptr("theirs"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.9.0.0/24")}})
		}), false},
		{"another address space", with("Succeeded", func(v *armnetwork.VirtualNetwork) {
			v.Properties.AddressSpace.AddressPrefixes = []*string{to.Ptr("10.0.0.0/16")}
		}), true},
		{"a subnet's NSG changed", with("Succeeded", func(v *armnetwork.VirtualNetwork) {
			v.Properties.Subnets[0].Properties.NetworkSecurityGroup = nil
		}), true},
		{"not provisioned", with("Failed", func(*armnetwork.VirtualNetwork) {}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			azuretest.Writes(t, body, err, tc.write)
		})
	}
}
