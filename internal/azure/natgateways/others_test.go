package natgateways_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/natgateways"
)

// A second public IP someone attached to the cluster's NAT gateway (for
// more SNAT ports), and a tag they set, survive winkube's reconcile.
func TestReconcileKeepsASecondPublicIP(t *testing.T) {
	ctx := context.Background()
	cfg := azuretest.Start(t, "rg")
	svc, err := natgateways.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ipID := func(name string) string { return azuretest.PublicIP(t, cfg, "rg", name) }
	spec := natgateways.Spec{ResourceGroup: "rg", Name: "nat", Location: azuretest.Location, PublicIPID: ipID("nat-ip"),
		Tags: map[string]*string{"winkube.dev_cluster_c": to.Ptr("owned")}}
	reconcile := func() {
		t.Helper()
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	second := ipID("nat-ip-2")
	c, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewNatGatewaysClient)
	cur, err := c.Get(ctx, "rg", "nat", nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := cur.NatGateway
	gw.Properties.PublicIPAddresses = append(gw.Properties.PublicIPAddresses, &armnetwork.SubResource{ID: to.Ptr(second)})
	gw.Tags["cost-center"] = to.Ptr("42")
	p, err := c.BeginCreateOrUpdate(ctx, "rg", "nat", gw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}

	reconcile()
	got, err := svc.Get(ctx, "rg", "nat")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.Properties.PublicIPAddresses); n != 2 {
		t.Errorf("the gateway has %d public IPs, want winkube's and the one someone added", n)
	}
	if got.Tags["cost-center"] == nil {
		t.Errorf("the tag someone set was dropped: %v", got.Tags)
	}
}
