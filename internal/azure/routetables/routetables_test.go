package routetables_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/routetables"
)

// The routes the cloud provider writes for host-gw, and a tag someone set,
// survive a table that must be written again (its last write failed).
func TestParametersKeepTheRoutes(t *testing.T) {
	cfg := azuretest.Start(t, "rg")
	svc, err := routetables.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewRouteTablesClient)
	routes, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewRoutesClient)
	ctx := context.Background()
	owned := map[string]*string{"sigs.k8s.io_cluster-api-provider-azure_cluster_demo": to.Ptr("owned")}
	spec := routetables.Spec{ResourceGroup: "rg", Name: "rt", Location: azuretest.Location, Tags: owned}
	if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
		t.Fatal(err)
	}
	p, err := routes.BeginCreateOrUpdate(ctx, "rg", "rt", "node-1", armnetwork.Route{Properties: &armnetwork.RoutePropertiesFormat{
		AddressPrefix: to.Ptr("10.244.1.0/24"), NextHopType: to.Ptr(armnetwork.RouteNextHopTypeVirtualAppliance), NextHopIPAddress: to.Ptr("10.1.0.4")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tables.UpdateTags(ctx, "rg", "rt", armnetwork.TagsObject{Tags: map[string]*string{"cost-center": to.Ptr("42"),
		"sigs.k8s.io_cluster-api-provider-azure_cluster_demo": to.Ptr("owned")}}, nil); err != nil {
		t.Fatal(err)
	}
	cur, err := tables.Get(ctx, "rg", "rt", nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tables.BeginCreateOrUpdate(ctx, "rg", "rt", routetables.Merged(spec, &cur.RouteTable), nil)
	if err != nil {
		t.Fatal(err)
	}
	after, err := w.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Properties.Routes); n != 1 || *after.Properties.Routes[0].Name != "node-1" {
		t.Errorf("the table written again has %d routes, want node-1", n)
	}
	if after.Tags["cost-center"] == nil {
		t.Errorf("the table written again lost the tag someone set: %v", after.Tags)
	}
}

func TestParameters(t *testing.T) {
	spec := routetables.Spec{ResourceGroup: "rg", Name: "rt", Location: "westeurope"}
	routes := []*armnetwork.Route{{Name: to.Ptr("pod-cidr"), Properties: &armnetwork.RoutePropertiesFormat{AddressPrefix: to.Ptr("192.168.1.0/24")}}}
	table := func(state string) *armnetwork.RouteTable {
		return &armnetwork.RouteTable{Properties: &armnetwork.RouteTablePropertiesFormat{ProvisioningState: to.Ptr(armnetwork.ProvisioningState(state)), Routes: routes}}
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.RouteTable
		write    bool
		routes   int
	}{
		{"missing: an empty table", nil, true, 0},
		{"provisioned: its routes are others' to manage", table("Succeeded"), false, 0},
		{"failed: written again with its routes", table("Failed"), true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if azuretest.Writes(t, body, err, tc.write) && tc.routes > 0 && (body.Properties == nil || len(body.Properties.Routes) != tc.routes) {
				t.Fatalf("the routes were dropped: %+v", body.Properties)
			}
		})
	}
}
