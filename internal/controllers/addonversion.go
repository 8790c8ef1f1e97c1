package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	events "k8s.io/client-go/tools/record"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
)

// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=controlplane.cluster.x-k8s.io,resources=kubeadmcontrolplanes,verbs=get;list;watch
// +kubebuilder:rbac:groups=addons.cluster.x-k8s.io,resources=clusterresourcesets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;update

// AddonsFollowedReason is the Event of a Cluster whose version-bound
// add-ons were moved to its control plane's version.
const AddonsFollowedReason = "AddonsFollowVersion"

// AddonVersionReconciler keeps a Cluster's version-bound add-ons (the
// Windows kube-proxy and the cloud controller and node managers, which the
// flavors and the clusterctl templates deliver as ClusterResourceSet
// ConfigMaps) at its control plane's version. KubeadmControlPlane moves
// only the Linux kube-proxy, once every control-plane Machine runs the new
// version (sigs.k8s.io/cluster-api v1.14.2 controlplane/kubeadm/pkg/
// workload_cluster.go, UpdateKubeProxyImageInfo); this does the same for
// the rest at the same moment, and the sets' Reconcile strategy applies
// the changed ConfigMaps to the workload cluster.
type AddonVersionReconciler struct {
	Client client.Client
	// Reader reads what the manager does not cache: ConfigMaps, and a
	// control plane of another provider than KubeadmControlPlane.
	Reader   client.Reader
	Recorder events.EventRecorder

	// setsWatched and kcpWatched say that SetupWithManager watches the
	// ClusterResourceSets and the KubeadmControlPlanes, so that Client
	// reads them from the manager's cache: a live LIST and GET at each wake
	// were about 24 of the management plane's requests per machine during a
	// bring-up.
	setsWatched, kcpWatched bool

	// followed remembers, per Cluster (by namespace/name, the value led by
	// its UID, so that a Cluster made again under the name is read anew,
	// and forgotten once the Cluster is deleted), the version and labels whose
	// add-ons were all found at that version: every status patch of the
	// Cluster and of its control plane wakes this controller (dozens per
	// machine during a bring-up), and reading each ConfigMap again live to
	// find nothing to move was most of the management plane's ConfigMap
	// reads. Lost on a restart, which reads them all once more.
	followed sync.Map
}

var kcpGK = schema.GroupKind{Group: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane"}

// SetupWithManager registers the controller: on Clusters, and on
// KubeadmControlPlanes when Cluster API's control-plane provider is
// installed (a management cluster may run another one; its Cluster's
// status changes when its control plane's do).
func (r *AddonVersionReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("addonversion-controller")
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&clusterv1.Cluster{})
	if _, err := mgr.GetRESTMapper().RESTMapping(kcpGK, controlplanev1.GroupVersion.Version); err == nil {
		b = b.Watches(&controlplanev1.KubeadmControlPlane{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfControlPlane))
		r.kcpWatched = true
	} else if !meta.IsNoMatchError(err) {
		return err
	}
	// A set made or changed after a Cluster settled (a new add-on, a
	// ConfigMap added to a set) wakes the Clusters it selects: the memory
	// of settled Clusters includes the sets' ConfigMaps, and the sets are
	// read from the cache, which this watch keeps.
	setGK := schema.GroupKind{Group: addonsv1.GroupVersion.Group, Kind: "ClusterResourceSet"}
	if _, err := mgr.GetRESTMapper().RESTMapping(setGK, addonsv1.GroupVersion.Version); err == nil {
		b = b.Watches(&addonsv1.ClusterResourceSet{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfSet),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
		r.setsWatched = true
	} else if !meta.IsNoMatchError(err) {
		return err
	}
	return b.WithOptions(opts).Named("addonversion").Complete(r)
}

// clustersOfSet are the Clusters of the set's namespace that it selects.
func (r *AddonVersionReconciler) clustersOfSet(ctx context.Context, o client.Object) []reconcile.Request {
	set, ok := o.(*addonsv1.ClusterResourceSet)
	if !ok {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&set.Spec.ClusterSelector)
	if err != nil || sel.Empty() {
		return nil
	}
	list := &clusterv1.ClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(set.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// clustersOfControlPlane are the Clusters whose controlPlaneRef names it.
func (r *AddonVersionReconciler) clustersOfControlPlane(ctx context.Context, o client.Object) []reconcile.Request {
	list := &clusterv1.ClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, c := range list.Items {
		ref := c.Spec.ControlPlaneRef
		if ref.Name == o.GetName() && ref.Kind == kcpGK.Kind && ref.APIGroup == kcpGK.Group {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return out
}

// Reconcile moves the Cluster's version-bound add-ons to its control
// plane's version once the control plane has rolled out.
func (r *AddonVersionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			r.followed.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		r.followed.Delete(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if (cluster.Spec.Paused != nil && *cluster.Spec.Paused) || !cluster.Spec.ControlPlaneRef.IsDefined() {
		return ctrl.Result{}, nil
	}
	v, ok, err := r.rolledOutVersion(ctx, cluster)
	if err != nil || !ok {
		return ctrl.Result{}, err
	}
	sets := &addonsv1.ClusterResourceSetList{}
	setsFrom := r.Reader
	if r.setsWatched {
		setsFrom = r.Client
	}
	if err := setsFrom.List(ctx, sets, client.InNamespace(cluster.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the ClusterResourceSets of namespace %s: %w", cluster.Namespace, err)
	}
	var names []string
	for i := range sets.Items {
		set := &sets.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(&set.Spec.ClusterSelector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(cluster.Labels)) {
			continue
		}
		for _, res := range set.Spec.Resources {
			// Only the cluster's own ConfigMaps (<cluster>-<add-on>, as the
			// flavors and the clusterctl templates name them): a ConfigMap
			// shared by clusters of other versions is left to its owner.
			if res.Kind == "ConfigMap" && strings.HasPrefix(res.Name, cluster.Name+"-") {
				names = append(names, res.Name)
			}
		}
	}
	// The ConfigMaps the cluster's sets name are part of what was settled:
	// a set applied later (its ConfigMap written from an older template)
	// is read, though neither the version nor the labels changed.
	slices.Sort(names)
	names = slices.Compact(names)
	done := string(cluster.UID) + "|" + v.String() + "|" + labels.Set(cluster.Labels).String() + "|" + strings.Join(names, ",")
	if was, ok := r.followed.Load(req.NamespacedName); ok && was == done {
		return ctrl.Result{}, nil
	}
	all := true
	for _, name := range names {
		found, err := r.follow(ctx, cluster, name, v)
		if err != nil {
			return ctrl.Result{}, err
		}
		all = all && found
	}
	if all {
		r.followed.Store(req.NamespacedName, done)
	}
	return ctrl.Result{}, nil
}

// rolledOutVersion is the control plane's version once all its machines
// run it (status.versions holds only spec.version; status.version, the
// lowest, for providers without versions).
func (r *AddonVersionReconciler) rolledOutVersion(ctx context.Context, cluster *clusterv1.Cluster) (images.Version, bool, error) {
	ref := cluster.Spec.ControlPlaneRef
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Kind: ref.Kind})
	mapping, err := r.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return images.Version{}, false, fmt.Errorf("the Cluster's control plane kind %s.%s: %w", ref.Kind, ref.APIGroup, err)
	}
	cp.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.getControlPlane(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, cp); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			// Not there yet, or a provider the manager may not read.
			log.FromContext(ctx).V(1).Info("cannot read the control plane", "error", err.Error())
			return images.Version{}, false, nil
		}
		return images.Version{}, false, err
	}
	want, _, _ := unstructured.NestedString(cp.Object, "spec", "version")
	if want == "" {
		return images.Version{}, false, nil
	}
	versions, found, _ := unstructured.NestedSlice(cp.Object, "status", "versions")
	if found {
		if len(versions) != 1 {
			return images.Version{}, false, nil
		}
		if m, ok := versions[0].(map[string]any); !ok || m["version"] != want {
			return images.Version{}, false, nil
		}
	} else if got, _, _ := unstructured.NestedString(cp.Object, "status", "version"); got != want {
		return images.Version{}, false, nil
	}
	v, err := images.ParseVersion(want)
	if err != nil {
		return images.Version{}, false, nil //nolint:nilerr // the control plane's webhook owns its version's form
	}
	return v, true, nil
}

// getControlPlane reads a KubeadmControlPlane from the cache its watch
// keeps, through its Go type (a manager caching unstructured objects would
// otherwise keep a second informer of the kind); any other provider's
// control plane, which the manager does not watch, is read live.
func (r *AddonVersionReconciler) getControlPlane(ctx context.Context, key client.ObjectKey, cp *unstructured.Unstructured) error {
	if !r.kcpWatched || cp.GroupVersionKind().GroupKind() != kcpGK {
		return r.Reader.Get(ctx, key, cp)
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := r.Client.Get(ctx, key, kcp); err != nil {
		return err
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kcp)
	if err != nil {
		return fmt.Errorf("reading KubeadmControlPlane %s: %w", key, err)
	}
	cp.Object = obj
	return nil
}

// follow rewrites one ConfigMap's version-bound images; the update is
// guarded by its resourceVersion, so a concurrent edit is read again.
// found is false when the ConfigMap is not there (yet).
func (r *AddonVersionReconciler) follow(ctx context.Context, cluster *clusterv1.Cluster, name string, v images.Version) (found bool, err error) {
	cm := &corev1.ConfigMap{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, cm); err != nil {
		return false, client.IgnoreNotFound(err) // the set waits for it too
	}
	var moved []string
	for k, doc := range cm.Data {
		out, changes, err := flavors.FollowVersion(doc, v)
		if err != nil {
			r.Recorder.Eventf(cluster, corev1.EventTypeWarning, AddonsFollowedReason,
				"ConfigMap %s: %v; set the image in the ConfigMap yourself, or upgrade to a version it has", name, err)
		}
		for _, c := range changes {
			moved = append(moved, c.From+" -> "+c.To)
		}
		cm.Data[k] = out
	}
	if len(moved) == 0 {
		return true, nil
	}
	if err := r.Client.Update(ctx, cm); err != nil {
		return true, fmt.Errorf("moving ConfigMap %s/%s to Kubernetes %s: %w", cm.Namespace, name, v, err)
	}
	r.Recorder.Eventf(cluster, corev1.EventTypeNormal, AddonsFollowedReason, "ConfigMap %s follows the control plane to %s: %s", name, v, strings.Join(moved, ", "))
	return true, nil
}
