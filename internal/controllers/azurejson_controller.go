package controllers

import (
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azurejson"
)

// +kubebuilder:rbac:groups=infrastructure.winkube.dev,resources=azuremachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch

// AzureJSONReconciler writes the cloud provider config of the nodes made
// from an AzureMachineTemplate, an AzureMachinePool or an AzureMachine not
// made from a template, as the Secret <name>-azure-json that their
// bootstrap configs place on the node, as Cluster API Provider Azure does.
type AzureJSONReconciler struct {
	Client client.Client
	// Secrets, when set, reads the Secrets this reconciler writes from the
	// manager's cache, which holds the clusters' Secrets (SecretCache):
	// they carry the cluster-name label, and the reconciler watches them
	// anyway. CAPZ reads Secrets live too and keeps such a reader beside
	// it, a client over the manager's cache (main.go secretCachingClient
	// @1e5b0b0c).
	Secrets client.Reader
	// Kind is AzureMachineTemplate, AzureMachinePool or AzureMachine.
	Kind string
	// Credentials says how the cloud provider authenticates, per cluster.
	// This is the seam for AzureClusterIdentity: until a cluster names an
	// identity, nodes use their managed identity in tenant TenantID.
	Credentials func(ctx context.Context, ac *infrav1.AzureCluster) (azurejson.Credentials, error)
	TenantID    string
	// IdentityClientID reads a user-assigned identity's client ID in the
	// cluster's Azure; nil leaves UserAssigned machines without one.
	IdentityClientID func(ctx context.Context, ac *infrav1.AzureCluster, providerID string) (string, error)
}

// clonedFromAnnotation marks an object Cluster API made from a template.
const clonedFromAnnotation = "cluster.x-k8s.io/cloned-from-name"

func (r *AzureJSONReconciler) newObject() client.Object {
	switch r.Kind {
	case "AzureMachinePool":
		return &infrav1.AzureMachinePool{}
	case "AzureMachine":
		return &infrav1.AzureMachine{}
	default:
		return &infrav1.AzureMachineTemplate{}
	}
}

// SetupWithManager registers the reconciler; an AzureCluster change (its
// network) rewrites the Secrets of its cluster.
func (r *AzureJSONReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	obj := r.newObject()
	list := func() client.ObjectList {
		switch r.Kind {
		case "AzureMachinePool":
			return &infrav1.AzureMachinePoolList{}
		case "AzureMachine":
			return &infrav1.AzureMachineList{}
		default:
			return &infrav1.AzureMachineTemplateList{}
		}
	}
	return ctrl.NewControllerManagedBy(mgr).For(obj).
		Owns(&corev1.Secret{}, builder.MatchEveryOwner).
		Watches(&infrav1.AzureCluster{}, handler.EnqueueRequestsFromMapFunc(r.azureClusterToObjects(list))).
		WithOptions(opts).Named("azurejson-" + r.Kind).Complete(r)
}

func (r *AzureJSONReconciler) azureClusterToObjects(newList func() client.ObjectList) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		name, ok := o.GetLabels()[clusterv1.ClusterNameLabel]
		if !ok {
			return nil
		}
		l := newList()
		if err := r.Client.List(ctx, l, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
			return nil
		}
		var out []ctrl.Request
		_ = forEachItem(l, func(item client.Object) {
			out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: item.GetNamespace(), Name: item.GetName()}})
		})
		return out
	}
}

func forEachItem(l client.ObjectList, f func(client.Object)) error {
	switch l := l.(type) {
	case *infrav1.AzureMachinePoolList:
		for i := range l.Items {
			f(&l.Items[i])
		}
	case *infrav1.AzureMachineList:
		for i := range l.Items {
			f(&l.Items[i])
		}
	case *infrav1.AzureMachineTemplateList:
		for i := range l.Items {
			f(&l.Items[i])
		}
	default:
		return fmt.Errorf("unexpected list %T", l)
	}
	return nil
}

// ownerClusterName finds an object's cluster from its cluster-name label or
// its owning Cluster (Cluster API sets itself as owner of the templates a
// cluster uses).
func ownerClusterName(o client.Object) string {
	if n := o.GetLabels()[clusterv1.ClusterNameLabel]; n != "" {
		return n
	}
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == "Cluster" {
			return ref.Name
		}
	}
	return ""
}

// Reconcile writes the object's <name>-azure-json Secret. It opens without
// the other reconcilers' scope (openScope): an AzureMachineTemplate has no
// conditions for the scope to patch or mark Paused, the AzureMachine and
// AzureMachinePool reconcilers already own those objects' conditions, and
// the Secret is wanted before Cluster API sets a Machine or MachinePool
// owner; it applies the same pause contract through the Cluster.
func (r *AzureJSONReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.newObject()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil // the Secret goes with its owner
	}
	if r.Kind == "AzureMachine" {
		if _, fromTemplate := obj.GetAnnotations()[clonedFromAnnotation]; fromTemplate {
			return ctrl.Result{}, nil // its template's Secret serves it
		}
	}
	name := ownerClusterName(obj)
	if name == "" {
		log.FromContext(ctx).V(1).Info("no cluster yet: waiting for the cluster-name label or a Cluster owner")
		return ctrl.Result{}, nil
	}
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, cluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if annotations.IsPaused(cluster, obj) {
		return ctrl.Result{}, nil
	}
	ac := &infrav1.AzureCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: cluster.Spec.InfrastructureRef.Name}, ac); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	n, err := namesOf(ac, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	creds, err := r.credentials(ctx, ac)
	if err != nil {
		return ctrl.Result{}, err
	}
	if creds, err = r.machineIdentity(ctx, ac, vmSpecOf(obj), creds); err != nil {
		return ctrl.Result{}, err
	}
	// Both roles use the node subnet and its security group: those are
	// where the cloud provider puts Services' load-balancer rules.
	cfg := azurejson.New(azurejson.Network{
		SubscriptionID: ac.Spec.SubscriptionID, ResourceGroup: n.rg, Location: ac.Spec.Location,
		VnetName: n.vnet, VnetResourceGroup: n.vnetRG, SubnetName: n.nodeSubnet.Name,
		SecurityGroupName: n.nodeSubnet.SecurityGroup.Name, RouteTableName: n.routeTable,
	}, creds)
	gvk, err := r.Client.GroupVersionKindFor(obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	want, err := azurejson.Secret(obj.GetName(), obj.GetNamespace(), name, *metav1.NewControllerRef(obj, gvk), cfg, cfg)
	if err != nil {
		return ctrl.Result{}, err
	}
	cur := &corev1.Secret{}
	if r.Secrets != nil {
		err = r.Secrets.Get(ctx, client.ObjectKeyFromObject(want), cur)
	}
	if r.Secrets == nil || apierrors.IsNotFound(err) {
		// Not in the cache (yet): the API server decides whether to
		// create it.
		err = r.Client.Get(ctx, client.ObjectKeyFromObject(want), cur)
	}
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, client.IgnoreAlreadyExists(r.Client.Create(ctx, want))
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ownedBy(cur, obj.GetUID()) {
		return ctrl.Result{}, fmt.Errorf("secret %s/%s exists and is not owned by %s %s: rename or delete it so that winkube can write the node's cloud config", cur.Namespace, cur.Name, r.Kind, obj.GetName())
	}
	labels := mergeMaps(cur.Labels, want.Labels)
	if reflect.DeepEqual(cur.Data, want.Data) && maps.Equal(cur.Labels, labels) {
		// Every change of the AzureCluster (its status, while the cluster
		// comes up) wakes this reconcile: the Secret is written only when
		// its content changes, as Cluster API's patch helper sends no
		// patch with nothing in it.
		return ctrl.Result{}, nil
	}
	cur.Data, cur.Labels = want.Data, labels
	return ctrl.Result{}, r.Client.Update(ctx, cur)
}

func ownedBy(o client.Object, uid types.UID) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

func (r *AzureJSONReconciler) credentials(ctx context.Context, ac *infrav1.AzureCluster) (azurejson.Credentials, error) {
	if r.Credentials != nil {
		return r.Credentials(ctx, ac)
	}
	tenant := r.TenantID
	if tenant == "" {
		// The tenant of the manager's own identity, as the Azure SDK's
		// environment credential reads it.
		tenant = os.Getenv("AZURE_TENANT_ID")
	}
	if tenant == "" {
		return azurejson.Credentials{}, fmt.Errorf("no Azure tenant for the cloud provider config of cluster %s: set AZURE_TENANT_ID for the manager", ac.Name)
	}
	return azurejson.Credentials{TenantID: tenant}, nil
}

// vmSpecOf is the VM spec of an AzureMachineTemplate, AzureMachinePool or
// AzureMachine.
func vmSpecOf(o client.Object) *infrav1.AzureVMSpec {
	switch t := o.(type) {
	case *infrav1.AzureMachineTemplate:
		return &t.Spec.Template.Spec.AzureVMSpec
	case *infrav1.AzureMachinePool:
		return &t.Spec.Template
	case *infrav1.AzureMachine:
		return &t.Spec.AzureVMSpec
	}
	return &infrav1.AzureVMSpec{}
}

// machineIdentity is CAPZ's rule for the cloud provider's credentials
// (controllers/helpers.go GetCloudProviderSecret @69ec3a40): a machine
// with an identity authenticates as it, through the VM's Instance Metadata
// Service (useManagedIdentityExtension), whatever the cluster's identity;
// a user-assigned one is named by its client ID, the first of the list.
// Without one the cluster's identity's credentials stay.
func (r *AzureJSONReconciler) machineIdentity(ctx context.Context, ac *infrav1.AzureCluster, vm *infrav1.AzureVMSpec, c azurejson.Credentials) (azurejson.Credentials, error) {
	switch vm.Identity {
	case infrav1.VMIdentitySystemAssigned:
		return azurejson.Credentials{TenantID: c.TenantID}, nil
	case infrav1.VMIdentityUserAssigned:
		if len(vm.UserAssignedIdentities) == 0 || r.IdentityClientID == nil {
			return c, nil
		}
		id, err := r.IdentityClientID(ctx, ac, vm.UserAssignedIdentities[0].ProviderID)
		if err != nil {
			return c, fmt.Errorf("reading the client ID of user-assigned identity %s: %w", vm.UserAssignedIdentities[0].ProviderID, err)
		}
		return azurejson.Credentials{TenantID: c.TenantID, UserAssignedIdentityID: id}, nil
	}
	return c, nil
}
