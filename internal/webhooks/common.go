// Package webhooks defaults and validates winkube's API objects, refusing bad
// input with messages that name the field and what to change. Checks that need
// other objects (name conflicts, the Kubernetes version of the owning Machine,
// the Cluster's pod and service ranges) read them live from the API server so
// that two objects created together cannot both slip through a stale cache.
package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/naming"
)

var (
	locationRE      = regexp.MustCompile(`^[a-z][a-z0-9]{1,40}$`)
	uuidRE          = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	resourceGroupRE = regexp.MustCompile(`^[-\w\._\(\)]{0,89}[-\w_\(\)]$`)
)

// topologyDryRunAnnotation marks the dry-run applies of Cluster API's topology
// controller, which must pass immutability checks (contract: SSA dry run).
const topologyDryRunAnnotation = "topology.cluster.x-k8s.io/dry-run"

func isTopologyDryRun(ctx context.Context, obj client.Object) bool {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.DryRun == nil || !*req.DryRun {
		return false
	}
	_, ok := obj.GetAnnotations()[topologyDryRunAnnotation]
	return ok
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *infrav1.AzureCluster:
		return "AzureCluster"
	case *infrav1.AzureClusterTemplate:
		return "AzureClusterTemplate"
	case *infrav1.AzureMachine:
		return "AzureMachine"
	case *infrav1.AzureMachineTemplate:
		return "AzureMachineTemplate"
	case *infrav1.AzureMachinePool:
		return "AzureMachinePool"
	case *infrav1.AzureMachinePoolMachine:
		return "AzureMachinePoolMachine"
	case *clusterv1.Cluster:
		return "Cluster"
	}
	return "Object"
}

// ownerVersion is the Kubernetes version of the Machine or MachinePool that
// owns obj, or "" when there is none yet (Cluster API adds the owner
// reference after creating the infrastructure object).
func ownerVersion(ctx context.Context, r client.Reader, obj client.Object) string {
	if r == nil {
		return ""
	}
	for _, ref := range obj.GetOwnerReferences() {
		if ref.APIVersion != clusterv1.GroupVersion.String() {
			continue
		}
		key := client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}
		switch ref.Kind {
		case "Machine":
			m := &clusterv1.Machine{}
			if r.Get(ctx, key, m) == nil {
				return m.Spec.Version
			}
		case "MachinePool":
			mp := &clusterv1.MachinePool{}
			if r.Get(ctx, key, mp) == nil {
				return mp.Spec.Template.Spec.Version
			}
		}
	}
	return ""
}

func decodeRaw(raw []byte, into any) error { return json.Unmarshal(raw, into) }

func semanticEqual(a, b any) bool { return apiequality.Semantic.DeepEqual(a, b) }

// nameConflict lists the objects of obj's kind in its cluster (same namespace
// and cluster-name label), narrowed by only, and reports one whose Azure
// name, as nameOf gives it, equals claimed.
func nameConflict(ctx context.Context, r client.Reader, list client.ObjectList, obj client.Object, claimed string, nameOf func(client.Object) string, prefix bool, only ...client.ListOption) error {
	if r == nil {
		return nil
	}
	cluster := obj.GetLabels()[clusterv1.ClusterNameLabel]
	opts := []client.ListOption{client.InNamespace(obj.GetNamespace())}
	if cluster != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.ClusterNameLabel: cluster})
	}
	opts = append(opts, only...)
	kind := kindOf(obj)
	if err := r.List(ctx, list, opts...); err != nil {
		return fmt.Errorf("listing the cluster's %s objects to check for name conflicts: %w", kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	var claims []naming.Claim
	for _, item := range items {
		o := item.(client.Object)
		if o.GetLabels()[clusterv1.ClusterNameLabel] != cluster {
			continue
		}
		claims = append(claims, naming.Claim{Object: kind + " " + o.GetNamespace() + "/" + o.GetName(), Name: nameOf(o)})
	}
	self := naming.Claim{Object: kind + " " + obj.GetNamespace() + "/" + obj.GetName(), Name: claimed}
	return naming.FindConflict(self, claims, prefix)
}
