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
//
// CAPZ's key names the cluster only (api/v1beta1/tags.go ClusterTagKey,
// sigs.k8s.io_cluster-api-provider-azure_cluster_<name>: owned, at
// kubernetes-sigs/cluster-api-provider-azure 2349883d), which is enough when
// one team owns the management cluster. On a
// shared one, two namespaces may each have a cluster called "demo", so
// winkube also tags NamespaceKey(cluster)=<namespace>, and a resource is an
// Owner's only when both tags say so.
//
// Resources tagged before the namespace tag existed ("unscoped": the
// cluster tag without NamespaceKey) cannot say which namespace made them.
// They count as an Owner's only when Owner.AdoptUnscoped is set, which the
// controllers set only while no AzureCluster of another namespace belongs to
// a cluster of that name; the first write then adds the namespace tag (the
// migration), after which a same-named cluster elsewhere never matches.
// When the name is ambiguous, an unscoped resource is neither changed nor
// deleted: its owner must add the namespace tag by hand (or delete the other
// cluster) first.
//
// Namespace and name do not tell apart two clusters called "prod" in
// "default" of two management clusters, which share a subscription (the
// resource group defaults to a name of the cluster's). So the cluster's
// group and network also carry UIDKey(cluster)=<the AzureCluster's
// identity> (Owner.UID): the first cluster to tag a group owns it, and
// the other is refused (*NotOwnedError with UID) and, when deleted, leaves
// it alone. Resources tagged before winkube wrote that tag are adopted by
// name and namespace, and tagged on the next write.
package tags

import (
	"context"
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

const namespaceKeyPrefix = "winkube.dev_namespace_"

// NamespaceKey is the tag naming the namespace of the cluster that owns a
// resource.
func NamespaceKey(cluster string) string { return namespaceKeyPrefix + cluster }

const uidKeyPrefix = "winkube.dev_uid_"

// UIDKey is the tag naming the identity of the cluster that owns a
// resource (Owner.UID): two clusters of the same name in the same
// namespace of two management clusters, or a cluster and an earlier one
// of its name whose group was left behind, tell their resources apart by
// it.
func UIDKey(cluster string) string { return uidKeyPrefix + cluster }

// ClusterUIDAnnotation keeps, on an AzureCluster, the identity its
// resources are tagged with (UIDKey): the AzureCluster's UID when it first
// reconciled. A UID changes when clusterctl move recreates the object in
// another management cluster; the annotation moves with it, so the moved
// cluster still owns what it made.
const ClusterUIDAnnotation = "winkube.dev/cluster-uid"

// Owner is who a resource belongs to: a cluster in a namespace.
type Owner struct {
	Cluster, Namespace string
	// UID, when set, is the cluster's identity (ClusterUIDAnnotation): a
	// resource tagged with another UID is another cluster's of the same
	// name. A resource without the UID tag (tagged by a winkube before it
	// wrote one) is the owner's by its other tags, and the next write adds
	// the UID tag (the migration); from then on a same-named cluster
	// elsewhere never matches.
	UID string
	// AdoptUnscoped makes a resource tagged before namespace tags existed
	// (cluster tag, no namespace tag) this owner's; see the package comment.
	AdoptUnscoped bool
}

// Owns reports whether tags t make a resource o's.
func (o Owner) Owns(t map[string]*string) bool {
	if !IsOwned(t, o.Cluster) {
		return false
	}
	if uid := t[UIDKey(o.Cluster)]; o.UID != "" && uid != nil && *uid != o.UID {
		return false
	}
	ns := t[NamespaceKey(o.Cluster)]
	if ns == nil {
		return o.AdoptUnscoped
	}
	return *ns == o.Namespace
}

// Foreign reports whether tags t mark a resource as another winkube
// cluster's than o's: tagged ClusterKey(name)=owned for another cluster's
// name, or for o's name but not as o's (another namespace, another
// identity, or unscoped while o may not adopt). Such a resource is neither
// o's nor one a user brought: a cluster that used it as the user's (a
// resource group or VNet named in its spec) would build in another
// cluster's group or network, and its machines would get roles there.
func (o Owner) Foreign(t map[string]*string) bool {
	if o.Owns(t) {
		return false
	}
	for k, v := range t {
		// Azure's tag names are case-insensitive.
		if len(k) > len(clusterKeyPrefix) && strings.EqualFold(k[:len(clusterKeyPrefix)], clusterKeyPrefix) && v != nil && strings.EqualFold(*v, Owned) {
			return true
		}
	}
	return false
}

// RefuseForeign is the refusal of a resource (kind name) whose tags t make
// it another winkube cluster's than o's (Foreign), or nil.
func (o Owner) RefuseForeign(kind, name string, t map[string]*string) *NotOwnedError {
	if !o.Foreign(t) {
		return nil
	}
	return &NotOwnedError{Kind: kind, Name: name, Cluster: o.Cluster, Foreign: true}
}

type adoptKey struct{}

// WithAdoptUnscoped marks a context whose writes may adopt unscoped
// resources (Owner.AdoptUnscoped), for CheckOwned called deep in the
// generic reconciler.
func WithAdoptUnscoped(ctx context.Context, adopt bool) context.Context {
	return context.WithValue(ctx, adoptKey{}, adopt)
}

// AdoptsUnscoped reports whether ctx came from WithAdoptUnscoped(ctx, true).
func AdoptsUnscoped(ctx context.Context) bool {
	v, _ := ctx.Value(adoptKey{}).(bool)
	return v
}

// RoleKey records what a resource is for (a machine's name, "apiserver", ...).
const RoleKey = "winkube.dev_role"

// Azure's tag limits (azure-resource-manager/management/tag-resources.md):
// at most 50 tags on a resource, a name of at most 512 characters without
// <, >, %, &, \, ? or /, a value of at most 256.
// OwnTags is the most tags winkube writes on one resource, which the 50
// leave for additionalTags: the cluster, namespace and role tags, with a
// scale set's model and custom-data digests (a cluster resource's identity
// tag is the fourth).
const OwnTags = 5

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

// Build returns the tags of a resource owned by o, with extra added.
func Build(o Owner, role string, extra map[string]string) map[string]*string {
	out := map[string]*string{}
	for k, v := range extra {
		out[k] = to.Ptr(v)
	}
	// Set last: extra tags must not be able to disown the resource.
	out[ClusterKey(o.Cluster)] = to.Ptr(Owned)
	if o.Namespace != "" {
		out[NamespaceKey(o.Cluster)] = to.Ptr(o.Namespace)
	}
	if o.UID != "" {
		out[UIDKey(o.Cluster)] = to.Ptr(o.UID)
	}
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
	// Namespace, when set: the resource is the cluster's by name, but not
	// provably of this namespace's cluster of that name.
	Namespace string
	// UID, when set: the resource is tagged as another cluster's of the
	// same name and namespace (UIDKey), whose UID this is.
	UID string
	// Foreign: the resource is another winkube cluster's (Owner.Foreign),
	// named in the spec as if it were the user's own.
	Foreign bool
}

func (e *NotOwnedError) Error() string {
	if e.Foreign {
		// The other cluster is not named: it may be another namespace's.
		return fmt.Sprintf("%s %s belongs to another winkube cluster (it carries another cluster's %s*=%s tag): winkube will not build cluster %s in it, "+
			"change it, or grant the cluster's machines roles on it; name a %s of this cluster's own, or one you made without winkube's tags",
			e.Kind, e.Name, clusterKeyPrefix, Owned, e.Cluster, e.Kind)
	}
	if e.UID != "" {
		return fmt.Sprintf("%s %s belongs to another cluster named %s in namespace %s (tagged %s=%s: a cluster of the same name in another management cluster, "+
			"or an earlier one whose resources were left behind): winkube will not change or delete it; set another resource group (or name) in the AzureCluster, "+
			"or, if this is that cluster moved without its annotations, set the annotation %s=%s on the AzureCluster",
			e.Kind, e.Name, e.Cluster, e.Namespace, UIDKey(e.Cluster), e.UID, ClusterUIDAnnotation, e.UID)
	}
	if e.Namespace != "" {
		return fmt.Sprintf("%s %s is tagged %s=%s but not %s=%s: it belongs to a cluster of the same name in another namespace "+
			"(or was tagged before winkube recorded namespaces, while another namespace has a cluster of this name): winkube will not change or delete it; "+
			"rename the cluster or the %s, or, if it is this cluster's, add the tag %s=%s to it",
			e.Kind, e.Name, ClusterKey(e.Cluster), Owned, NamespaceKey(e.Cluster), e.Namespace, e.Kind, NamespaceKey(e.Cluster), e.Namespace)
	}
	return fmt.Sprintf("%s %s already exists and is not winkube's (it lacks the tag %s=%s): winkube will not change or delete it; "+
		"rename winkube's %s in the spec, or remove yours", e.Kind, e.Name, ClusterKey(e.Cluster), Owned, e.Kind)
}

// CheckOwned returns a *NotOwnedError when want (the tags winkube would
// write, from Build) claims a cluster's ownership that have (the tags of the
// resource that exists) does not carry: the cluster tag, and the namespace
// tag when want has one (an unscoped resource only with adoptUnscoped).
func CheckOwned(kind, name string, want, have map[string]*string, adoptUnscoped bool) error {
	for k, v := range want {
		if !strings.HasPrefix(k, clusterKeyPrefix) || v == nil || *v != Owned {
			continue
		}
		cluster := strings.TrimPrefix(k, clusterKeyPrefix)
		if h := have[k]; h == nil || *h != Owned {
			return &NotOwnedError{Kind: kind, Name: name, Cluster: cluster}
		}
		ns := want[NamespaceKey(cluster)]
		if ns == nil {
			continue
		}
		if h := have[NamespaceKey(cluster)]; (h == nil && !adoptUnscoped) || (h != nil && *h != *ns) {
			return &NotOwnedError{Kind: kind, Name: name, Cluster: cluster, Namespace: *ns}
		}
		if w, h := want[UIDKey(cluster)], have[UIDKey(cluster)]; w != nil && h != nil && *h != *w {
			return &NotOwnedError{Kind: kind, Name: name, Cluster: cluster, Namespace: *ns, UID: *h}
		}
	}
	return nil
}
