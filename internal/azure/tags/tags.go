// Package tags marks the Azure resources winkube creates, so that deletion
// removes what winkube owns and nothing a user brought.
package tags

import "github.com/Azure/azure-sdk-for-go/sdk/azcore/to"

// ClusterKey is the tag naming the cluster that owns a resource.
func ClusterKey(cluster string) string { return "winkube.dev_cluster_" + cluster }

// Owned is the value of ClusterKey on resources winkube created.
const Owned = "owned"

// RoleKey records what a resource is for (a machine's name, "apiserver", ...).
const RoleKey = "winkube.dev_role"

// Build returns the tags of a resource owned by cluster, with extra added.
func Build(cluster, role string, extra map[string]string) map[string]*string {
	out := map[string]*string{ClusterKey(cluster): to.Ptr(Owned)}
	if role != "" {
		out[RoleKey] = to.Ptr(role)
	}
	for k, v := range extra {
		out[k] = to.Ptr(v)
	}
	return out
}

// IsOwned reports whether tags mark a resource as cluster's.
func IsOwned(t map[string]*string, cluster string) bool {
	v := t[ClusterKey(cluster)]
	return v != nil && *v == Owned
}
