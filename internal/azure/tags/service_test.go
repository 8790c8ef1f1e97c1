package tags_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/tags"
)

// An additionalTags edit reaches an existing resource through the Tags API:
// a new tag is merged in, one winkube wrote and the spec dropped is
// removed, and tags others set, including one of a name winkube once
// wrote but whose value they changed, stay. A resource that is not the
// owner's is not touched.
func TestReconcileMergesAndRemovesOnlyWhatWinkubeWrote(t *testing.T) {
	ctx := context.Background()
	cfg := azuretest.Start(t, "rg")
	svc, err := tags.NewService(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nsgs, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewSecurityGroupsClient)
	o := tags.Owner{Cluster: "prod", Namespace: "team-a"}
	mk := func(name string, t0 map[string]*string) string {
		t.Helper()
		p, err := nsgs.BeginCreateOrUpdate(ctx, "rg", name, armnetwork.SecurityGroup{Location: to.Ptr(azuretest.Location), Tags: t0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.PollUntilDone(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return *r.ID
	}
	had := tags.Build(o, "node-nsg", map[string]string{"env": "dev", "team": "a", "owner": "x"})
	had["cost-center"], had["owner"] = to.Ptr("42"), to.Ptr("changed-by-someone")
	id := mk("nsg", had)
	theirs := mk("theirs", map[string]*string{"env": to.Ptr("dev")})

	want := tags.Build(o, "node-nsg", map[string]string{"team": "b", "tier": "gold"})
	last := map[string]string{"env": "dev", "team": "a", "owner": "x"}
	if done, err := svc.Reconcile(ctx, o, id, want, last); err != nil || !done {
		t.Fatalf("Reconcile: done %v, %v", done, err)
	}
	got, err := nsgs.Get(ctx, "rg", "nsg", nil)
	if err != nil {
		t.Fatal(err)
	}
	val := func(k string) string {
		if v := got.Tags[k]; v != nil {
			return *v
		}
		return "<none>"
	}
	for k, v := range map[string]string{"team": "b", "tier": "gold", "env": "<none>", "cost-center": "42", "owner": "changed-by-someone",
		tags.ClusterKey("prod"): tags.Owned, tags.NamespaceKey("prod"): "team-a"} {
		if val(k) != v {
			t.Errorf("tag %s = %s, want %s", k, val(k), v)
		}
	}

	if done, err := svc.Reconcile(ctx, o, theirs, want, last); err != nil || done {
		t.Fatalf("Reconcile of a resource that is not the owner's: done %v, %v", done, err)
	}
	other, err := nsgs.Get(ctx, "rg", "theirs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(other.Tags) != 1 || other.Tags["env"] == nil {
		t.Errorf("the tags of a resource that is not the cluster's were changed: %v", other.Tags)
	}
}
