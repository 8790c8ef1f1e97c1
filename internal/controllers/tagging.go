package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/cloud"
	"github.com/winkube/winkube/internal/azure/tags"
)

// lastAppliedTags is the record of the additional tags winkube last applied
// to an object's resources (tags.LastAppliedAnnotation); ok is false when
// there is none (an object reconciled by an older winkube, or never
// tagged): nothing is then known to be winkube's to remove.
func lastAppliedTags(obj client.Object) (last map[string]string, ok bool) {
	v, found := obj.GetAnnotations()[tags.LastAppliedAnnotation]
	if !found || json.Unmarshal([]byte(v), &last) != nil {
		return nil, false
	}
	return last, true
}

func setLastAppliedTags(obj client.Object, applied map[string]string) {
	if applied == nil {
		applied = map[string]string{}
	}
	b, _ := json.Marshal(applied) // a map of strings always encodes
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[tags.LastAppliedAnnotation] = string(b)
	obj.SetAnnotations(a)
}

// reconcileClusterTags brings the AzureCluster's additionalTags to the
// cluster's resources that exist: PUTs are sent only when a resource's
// model is wrong, and a tag edit alone is no reason to write one. It runs
// the Tags API (merge what the spec adds or changes, remove only what the
// record says winkube wrote), as CAPZ's tags service does for its
// resources (azure/services/tags/tags.go Reconcile, kubernetes-sigs/
// cluster-api-provider-azure 69ec3a40), and then records what it applied.
// Nothing is read while the record already says what the spec says.
// Resources that are not the cluster's (a user's group or VNet) are left
// alone.
func reconcileClusterTags(ctx context.Context, svc *cloud.Services, ac *infrav1.AzureCluster, n clusterNames, owner tags.Owner) error {
	want := ac.Spec.AdditionalTags
	last, ok := lastAppliedTags(ac)
	if ok && maps.Equal(last, want) {
		return nil
	}
	sub := ac.Spec.SubscriptionID
	id := func(rg, typ, name string) string { return armID(sub, rg, "Microsoft.Network", typ, name) }
	for _, r := range []struct{ role, scope string }{
		{"resourcegroup", resourceGroupID(sub, n.rg)},
		{"controlplane-nsg", id(n.rg, "networkSecurityGroups", n.cpSubnet.SecurityGroup.Name)},
		{"node-nsg", id(n.rg, "networkSecurityGroups", n.nodeSubnet.SecurityGroup.Name)},
		{"node-routetable", id(n.rg, "routeTables", n.routeTable)},
		{"node-natgw-ip", id(n.rg, "publicIPAddresses", n.natGWIP)},
		{"node-natgw", id(n.rg, "natGateways", n.natGateway)},
		{"vnet", id(n.vnetRG, "virtualNetworks", n.vnet)},
		{"apiserver-ip", id(n.rg, "publicIPAddresses", n.apiIP)},
		{"apiserver-lb", id(n.rg, "loadBalancers", n.lb)},
	} {
		if _, err := svc.Tags.Reconcile(ctx, owner, r.scope, tags.Build(owner, r.role, want), last); err != nil {
			return fmt.Errorf("applying additionalTags: %w", err)
		}
	}
	setLastAppliedTags(ac, want)
	return nil
}

// groupOwner is the owner of the cluster's group and network, which carry
// the cluster's identity tag as well: owner with the UID the AzureCluster
// recorded (none yet, and any identity tag is accepted).
func groupOwner(owner tags.Owner, ac *infrav1.AzureCluster) tags.Owner {
	owner.UID = ac.Annotations[tags.ClusterUIDAnnotation]
	return owner
}

// clusterUID is the identity an AzureCluster's resources are tagged with
// (tags.Owner.UID): its tags.ClusterUIDAnnotation, set to its own UID on
// the first reconcile (saved with the object; clusterctl move carries it).
// An identity tag is a refusal of same-named clusters, not a secret: a
// tenant who writes another cluster's identity into its own AzureCluster
// still needs that cluster's namespace name and Azure credentials that
// reach its subscription.
func clusterUID(ac *infrav1.AzureCluster) string {
	if v := ac.Annotations[tags.ClusterUIDAnnotation]; v != "" {
		return v
	}
	if ac.Annotations == nil {
		ac.Annotations = map[string]string{}
	}
	ac.Annotations[tags.ClusterUIDAnnotation] = string(ac.UID)
	return string(ac.UID)
}
