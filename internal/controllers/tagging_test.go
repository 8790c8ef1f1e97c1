package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/poll"
)

// An additionalTags edit reaches the cluster's existing resources (finding
// 8 of issue 54): a new or changed tag is added, one winkube applied and
// the edit dropped is removed, and a tag someone else set (a policy's) is
// kept, on the group, the VNet, the NSGs, the NAT gateway and the load
// balancer.
func TestAdditionalTagsReachExistingResources(t *testing.T) {
	parallel(t)
	_, cfg := newEmulator(t, arm.Options{})
	stop := startControllers(t, cfg)
	defer stop()
	f := newCluster(t, "tagged", func(s *infrav1.AzureClusterSpec) { s.AdditionalTags = map[string]string{"env": "dev", "team": "a"} })
	f.waitClusterProvisioned(time.Minute)
	ctx := context.Background()
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	tagsAPI, _ := armresources.NewTagsClient(subscription, cfg.Credential, opts)
	rg := f.ac.Spec.ResourceGroup
	ns := f.ac.Spec.NetworkSpec
	scopes := map[string]string{
		"resource group": "/subscriptions/" + subscription + "/resourceGroups/" + rg,
		"VNet":           netID(rg, "virtualNetworks", ns.Vnet.Name),
		"node NSG":       netID(rg, "networkSecurityGroups", ns.Subnets[1].SecurityGroup.Name),
		"NAT gateway":    netID(rg, "natGateways", "tagged-node-natgw"),
		"load balancer":  netID(rg, "loadBalancers", ns.APIServerLB.Name),
	}
	for _, scope := range scopes {
		// What Azure Policy's "inherit a tag from the resource group"
		// (or a cost tool) adds.
		if _, err := tagsAPI.UpdateAtScope(ctx, scope, armresources.TagsPatchResource{Operation: to.Ptr(armresources.TagsPatchOperationMerge),
			Properties: &armresources.Tags{Tags: map[string]*string{"cost-center": to.Ptr("42")}}}, nil); err != nil {
			t.Fatal(err)
		}
	}

	ac := &infrav1.AzureCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.ac), ac); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ac.DeepCopy())
	ac.Spec.AdditionalTags = map[string]string{"team": "b", "tier": "gold"}
	if err := env.Client.Patch(ctx, ac, patch); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"team": "b", "tier": "gold", "env": "", "cost-center": "42", "winkube.dev_cluster_tagged": "owned"}
	poll.Until(t, time.Minute, func() string {
		for what, scope := range scopes {
			got, err := tagsAPI.GetAtScope(ctx, scope, nil)
			if err != nil {
				return err.Error()
			}
			for k, v := range want {
				have := ""
				if p := got.Properties.Tags[k]; p != nil {
					have = *p
				}
				if have != v {
					return fmt.Sprintf("the %s's tag %s is %q, want %q", what, k, have, v)
				}
			}
		}
		return ""
	})
}

func netID(rg, typ, name string) string {
	return "/subscriptions/" + subscription + "/resourceGroups/" + rg + "/providers/Microsoft.Network/" + typ + "/" + name
}
