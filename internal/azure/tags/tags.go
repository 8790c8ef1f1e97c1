// Package tags marks the Azure resources winkube creates, so that deletion
// removes what winkube owns and nothing a user brought.
//
// The rule, as in CAPZ (whose key is
// sigs.k8s.io_cluster-api-provider-azure_cluster_<name>): a resource tagged
// ClusterKey(cluster)=owned is the cluster's; winkube creates it, changes it
// and deletes it. A resource of the same name without that tag is someone
// else's: winkube refuses to use it and never changes or deletes it. winkube
// uses a key of its own so that neither provider mistakes the other's
// resources for its own.
package tags

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
)

const clusterKeyPrefix = "winkube.dev_cluster_"

// ClusterKey is the tag naming the cluster that owns a resource.
func ClusterKey(cluster string) string { return clusterKeyPrefix + cluster }

// Owned is the value of ClusterKey on resources winkube created.
const Owned = "owned"

// RoleKey records what a resource is for (a machine's name, "apiserver", ...).
const RoleKey = "winkube.dev_role"

// Azure's tag limits (azure-resource-manager/management/tag-resources.md):
// at most 50 tags on a resource, a name of at most 512 characters without
// <, >, %, &, \, ? or /, a value of at most 256.
const (
	MaxTags        = 50
	MaxNameLength  = 512
	MaxValueLength = 256
	ReservedChars  = `<>%&\?/`
)

// ObjectRole is the role value of a resource of one Kubernetes object:
// kind_namespace_name, which fits a tag's 256 characters for any name up
// to some 240 characters; a longer one keeps its start and a hash of the
// whole, so that two objects never share a role.
func ObjectRole(kind, namespace, name string) string {
	role := kind + "_" + namespace + "_" + name
	if len(role) <= MaxValueLength {
		return role
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(role))
	sum := strconv.FormatUint(h.Sum64(), 36)
	return role[:MaxValueLength-len(sum)-1] + "_" + sum
}

// Build returns the tags of a resource owned by cluster, with extra added.
func Build(cluster, role string, extra map[string]string) map[string]*string {
	out := map[string]*string{}
	for k, v := range extra {
		out[k] = to.Ptr(v)
	}
	// Set last: extra tags must not be able to disown the resource.
	out[ClusterKey(cluster)] = to.Ptr(Owned)
	if role != "" {
		out[RoleKey] = to.Ptr(role)
	}
	return out
}

// IsOwned reports whether tags mark a resource as cluster's.
func IsOwned(t map[string]*string, cluster string) bool {
	v := t[ClusterKey(cluster)]
	return v != nil && *v == Owned
}

// NotOwnedError is an existing resource that winkube was about to create but
// that is not winkube's: it must not be changed.
type NotOwnedError struct {
	Kind, Name, Cluster string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %s already exists and is not winkube's (it lacks the tag %s=%s): winkube will not change or delete it; "+
		"rename winkube's %s in the spec, or remove yours", e.Kind, e.Name, ClusterKey(e.Cluster), Owned, e.Kind)
}

// CheckOwned returns a *NotOwnedError when want (the tags winkube would
// write, from Build) claims a cluster's ownership that have (the tags of the
// resource that exists) does not carry.
func CheckOwned(kind, name string, want, have map[string]*string) error {
	for k, v := range want {
		if !strings.HasPrefix(k, clusterKeyPrefix) || v == nil || *v != Owned {
			continue
		}
		if h := have[k]; h == nil || *h != Owned {
			return &NotOwnedError{Kind: kind, Name: name, Cluster: strings.TrimPrefix(k, clusterKeyPrefix)}
		}
	}
	return nil
}
