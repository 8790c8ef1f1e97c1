package vnets_test

import (
	"context"
	"slices"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/vnets"
)

// What a network team sets on the cluster's VNet (DNS servers, a DDoS
// protection plan, an address space for a peered range, a cost tag)
// survives winkube adding a subnet to it.
func TestReconcileKeepsWhatOthersSetOnTheVNet(t *testing.T) {
	cfg := azuretest.Start(t, "rg")
	svc, err := vnets.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewVirtualNetworksClient)
	ctx := context.Background()
	spec := vnets.Spec{ResourceGroup: "rg", Name: "vnet", Location: azuretest.Location, CIDRs: []string{"10.0.0.0/8"},
		Subnets: []vnets.Subnet{{Name: "cp", CIDRs: []string{"10.0.0.0/16"}}}, Tags: map[string]*string{"winkube.dev_cluster_c": to.Ptr("owned")}}
	reconcile := func() {
		t.Helper()
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()

	cur, err := c.Get(ctx, "rg", "vnet", nil)
	if err != nil {
		t.Fatal(err)
	}
	v := cur.VirtualNetwork
	ddos := "/subscriptions/" + azuretest.Subscription + "/resourceGroups/net/providers/Microsoft.Network/ddosProtectionPlans/plan"
	v.Properties.DhcpOptions = &armnetwork.DhcpOptions{DNSServers: []*string{to.Ptr("10.255.0.4")}}
	v.Properties.DdosProtectionPlan = &armnetwork.SubResource{ID: to.Ptr(ddos)}
	v.Properties.EnableDdosProtection = to.Ptr(true)
	v.Properties.AddressSpace.AddressPrefixes = append(v.Properties.AddressSpace.AddressPrefixes, to.Ptr("172.16.0.0/16"))
	v.Tags["cost-center"] = to.Ptr("42")
	p, err := c.BeginCreateOrUpdate(ctx, "rg", "vnet", v, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}

	spec.Subnets = append(spec.Subnets, vnets.Subnet{Name: "nodes", CIDRs: []string{"10.1.0.0/16"}})
	reconcile()
	got, err := svc.Get(ctx, "rg", "vnet")
	if err != nil {
		t.Fatal(err)
	}
	gp := got.Properties
	if len(gp.Subnets) != 2 {
		t.Fatalf("winkube's subnet was not added: %d subnets", len(gp.Subnets))
	}
	if gp.DhcpOptions == nil || len(gp.DhcpOptions.DNSServers) != 1 || *gp.DhcpOptions.DNSServers[0] != "10.255.0.4" {
		t.Errorf("the VNet's DNS servers were dropped: %+v", gp.DhcpOptions)
	}
	if gp.DdosProtectionPlan == nil || gp.DdosProtectionPlan.ID == nil || *gp.DdosProtectionPlan.ID != ddos || gp.EnableDdosProtection == nil || !*gp.EnableDdosProtection {
		t.Errorf("the VNet's DDoS protection plan was dropped: %+v %v", gp.DdosProtectionPlan, gp.EnableDdosProtection)
	}
	var prefixes []string
	for _, pr := range gp.AddressSpace.AddressPrefixes {
		prefixes = append(prefixes, *pr)
	}
	if !slices.Contains(prefixes, "172.16.0.0/16") || !slices.Contains(prefixes, "10.0.0.0/8") {
		t.Errorf("address space %v: the prefix someone added was dropped", prefixes)
	}
	if got.Tags["cost-center"] == nil || got.Tags["winkube.dev_cluster_c"] == nil {
		t.Errorf("tags %v: someone else's tag or winkube's was dropped", keys(got.Tags))
	}
}
