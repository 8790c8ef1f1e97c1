package securitygroups_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/securitygroups"
)

// A tag someone set on the cluster's NSG (one a policy requires) survives
// winkube writing a new rule into it.
func TestReconcileKeepsTagsOthersSet(t *testing.T) {
	ctx := context.Background()
	cfg := azuretest.Start(t, "rg")
	svc, err := securitygroups.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := securitygroups.Spec{ResourceGroup: "rg", Name: "nsg", Location: azuretest.Location, Tags: map[string]*string{"winkube.dev_cluster_c": to.Ptr("owned")},
		Rules: []securitygroups.Rule{{Name: "allow-apiserver", Protocol: "Tcp", Direction: "Inbound", Priority: 100, DestinationPorts: "6443", Access: "Allow"}}}
	reconcile := func() {
		t.Helper()
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	c, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityGroupsClient)
	if _, err := c.UpdateTags(ctx, "rg", "nsg", armnetwork.TagsObject{Tags: map[string]*string{"winkube.dev_cluster_c": to.Ptr("owned"), "cost-center": to.Ptr("42")}}, nil); err != nil {
		t.Fatal(err)
	}
	spec.Rules = append(spec.Rules, securitygroups.Rule{Name: "allow-ssh", Protocol: "Tcp", Direction: "Inbound", Priority: 110, DestinationPorts: "22", Access: "Allow"})
	reconcile()
	got, err := svc.Get(ctx, "rg", "nsg")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Properties.SecurityRules) != 2 {
		t.Fatalf("the new rule was not written: %d rules", len(got.Properties.SecurityRules))
	}
	if got.Tags["cost-center"] == nil || got.Tags["winkube.dev_cluster_c"] == nil {
		t.Errorf("tags %v: the tag someone set, or winkube's, was dropped", got.Tags)
	}
}
