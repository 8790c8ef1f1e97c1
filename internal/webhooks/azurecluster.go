package webhooks

import (
	"context"
	"fmt"
	"github.com/winkube/winkube/internal/naming"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/mutate-infrastructure-winkube-dev-v1alpha1-azurecluster,mutating=true,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azureclusters,versions=v1alpha1,name=default.azurecluster.infrastructure.winkube.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-winkube-dev-v1alpha1-azurecluster,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azureclusters,versions=v1alpha1,name=validation.azurecluster.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureCluster defaults and validates AzureClusters. It reads the owning
// Cluster, when there is one, to keep pod and service ranges off the VNet.
type AzureCluster struct {
	Reader client.Reader
	// Records guards the controllers' records (records.go).
	Records *Records
}

// clusterName is the Cluster API cluster an object belongs to: its
// cluster-name label, or for an AzureCluster created before Cluster API
// labelled it, its own name.
func clusterName(obj client.Object) string {
	if n := obj.GetLabels()[clusterv1.ClusterNameLabel]; n != "" {
		return n
	}
	return obj.GetName()
}

// Default fills in the resource group, VNet, subnets, NSGs and load balancer.
func (w *AzureCluster) Default(_ context.Context, c *infrav1.AzureCluster) error {
	defaultClusterSpec(clusterName(c), &c.Spec)
	return nil
}

func defaultClusterSpec(name string, s *infrav1.AzureClusterSpec) {
	if s.ResourceGroup == "" {
		s.ResourceGroup = name
	}
	defaultNetwork(name, &s.NetworkSpec)
}

func validateClusterSpec(s *infrav1.AzureClusterSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Location == "" {
		errs = append(errs, field.Required(p.Child("location"), "set the Azure region, such as westeurope"))
	} else if !locationRE.MatchString(s.Location) {
		detail := "an Azure region name is lower-case letters and digits, such as westeurope or eastus2"
		if name := strings.ToLower(strings.ReplaceAll(s.Location, " ", "")); locationRE.MatchString(name) {
			detail += fmt.Sprintf(" (the portal's %q is %s)", s.Location, name)
		}
		errs = append(errs, field.Invalid(p.Child("location"), s.Location, detail))
	}
	if s.SubscriptionID == "" {
		errs = append(errs, field.Required(p.Child("subscriptionID"), "set the Azure subscription ID"))
	} else if !uuidRE.MatchString(s.SubscriptionID) {
		errs = append(errs, field.Invalid(p.Child("subscriptionID"), s.SubscriptionID, "an Azure subscription ID is a GUID such as 00000000-0000-0000-0000-000000000000"))
	}
	if s.ResourceGroup != "" && !resourceGroupRE.MatchString(s.ResourceGroup) {
		errs = append(errs, field.Invalid(p.Child("resourceGroup"), s.ResourceGroup, "a resource group name is 1 to 90 letters, digits, '.', '_', '-' or '(' ')', and must not end with '.'"))
	}
	errs = append(errs, validateClusterIdentity(s, p)...)
	errs = append(errs, validateTags(s.AdditionalTags, p.Child("additionalTags"))...)
	return append(errs, validateNetwork(&s.NetworkSpec, p.Child("networkSpec"))...)
}

// ValidateCreate checks the spec and the owning Cluster's ranges.
func (w *AzureCluster) ValidateCreate(ctx context.Context, c *infrav1.AzureCluster) (admission.Warnings, error) {
	errs := validateClusterSpec(&c.Spec, field.NewPath("spec"))
	if name := clusterName(c); naming.ClusterNameProblem(name) != "" {
		path := field.NewPath("metadata", "name")
		if c.GetLabels()[clusterv1.ClusterNameLabel] != "" {
			path = field.NewPath("metadata", "labels").Key(clusterv1.ClusterNameLabel)
		}
		errs = append(errs, field.Invalid(path, name, "the cluster name "+naming.ClusterNameProblem(name)))
	}
	errs = append(errs, validateClusterNames(clusterName(c), &c.Spec, field.NewPath("spec"))...)
	errs = append(errs, refusedOnWrite(nil, &c.Spec, field.NewPath("spec"))...)
	errs = append(errs, w.validateAgainstCluster(ctx, c)...)
	return nil, invalid(c, errs)
}

// ValidateUpdate also refuses changes Azure cannot make in place.
func (w *AzureCluster) ValidateUpdate(ctx context.Context, oldC, c *infrav1.AzureCluster) (admission.Warnings, error) {
	p := field.NewPath("spec")
	errs := validateClusterSpec(&c.Spec, p)
	immutable := func(path *field.Path, changed bool, why string) {
		if changed {
			errs = append(errs, field.Forbidden(path, why))
		}
	}
	immutable(p.Child("subscriptionID"), oldC.Spec.SubscriptionID != c.Spec.SubscriptionID, "cannot change: a cluster cannot move to another subscription")
	errs = append(errs, validateClusterIdentityUpdate(&oldC.Spec, &c.Spec, p)...)
	immutable(p.Child("location"), oldC.Spec.Location != c.Spec.Location, "cannot change: a cluster cannot move to another region")
	immutable(p.Child("resourceGroup"), oldC.Spec.ResourceGroup != c.Spec.ResourceGroup, "cannot change: the cluster's resources live in it")
	immutable(p.Child("networkSpec", "vnet", "name"), oldC.Spec.NetworkSpec.Vnet.Name != c.Spec.NetworkSpec.Vnet.Name, "cannot change once the VNet exists")
	immutable(p.Child("networkSpec", "vnet", "resourceGroup"), oldC.Spec.NetworkSpec.Vnet.ResourceGroup != c.Spec.NetworkSpec.Vnet.ResourceGroup, "cannot change once the VNet exists")
	immutable(p.Child("networkSpec", "vnet", "cidrBlocks"), !apiequality.Semantic.DeepEqual(oldC.Spec.NetworkSpec.Vnet.CIDRBlocks, c.Spec.NetworkSpec.Vnet.CIDRBlocks), "cannot change once the VNet exists: machines hold addresses in it")
	errs = append(errs, immutableNetworkNames(&oldC.Spec.NetworkSpec, &c.Spec.NetworkSpec, p.Child("networkSpec"))...)
	errs = append(errs, refusedOnWrite(&oldC.Spec, &c.Spec, p)...)
	if oldEP := oldC.Spec.ControlPlaneEndpoint; oldEP.Host != "" {
		immutable(p.Child("controlPlaneEndpoint"), oldEP != c.Spec.ControlPlaneEndpoint, "cannot change once set: every node and kubeconfig points at it")
	}
	errs = append(errs, w.validateAgainstCluster(ctx, c)...)
	errs = append(errs, w.Records.check(ctx, oldC, c)...)
	return nil, invalid(c, errs)
}

// ValidateDelete allows deletion; the controller cleans up.
func (w *AzureCluster) ValidateDelete(context.Context, *infrav1.AzureCluster) (admission.Warnings, error) {
	return nil, nil
}

// validateAgainstCluster checks the Cluster's pod and service ranges when the
// Cluster exists already; the Cluster webhook checks the other order.
func (w *AzureCluster) validateAgainstCluster(ctx context.Context, c *infrav1.AzureCluster) field.ErrorList {
	if w.Reader == nil {
		return nil
	}
	cluster := &clusterv1.Cluster{}
	err := w.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: clusterName(c)}, cluster)
	if err != nil || cluster.Spec.InfrastructureRef.Name != c.Name {
		return nil // no Cluster yet, or not this one's
	}
	vnetPath := field.NewPath("spec", "networkSpec", "vnet", "cidrBlocks")
	var errs field.ErrorList
	for _, e := range clusterRangeErrors(cluster, c.Spec.NetworkSpec.Vnet.CIDRBlocks) {
		errs = append(errs, field.Invalid(vnetPath, c.Spec.NetworkSpec.Vnet.CIDRBlocks,
			fmt.Sprintf("Cluster %s has %s = %v, but %s", cluster.Name, e.Field, e.BadValue, e.Detail)))
	}
	return errs
}

func clusterRangeErrors(cluster *clusterv1.Cluster, vnet []string) field.ErrorList {
	p := field.NewPath("spec", "clusterNetwork")
	errs := validateClusterNetworkAgainstVnet(vnet, "pod", cluster.Spec.ClusterNetwork.Pods.CIDRBlocks, p.Child("pods", "cidrBlocks"))
	return append(errs, validateClusterNetworkAgainstVnet(vnet, "service", cluster.Spec.ClusterNetwork.Services.CIDRBlocks, p.Child("services", "cidrBlocks"))...)
}

// invalid turns field errors into the API's Invalid status, which kubectl
// prints with every field and message.
func invalid(obj client.Object, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		gvk = infrav1.GroupVersion.WithKind(kindOf(obj))
	}
	return apierrors.NewInvalid(gvk.GroupKind(), obj.GetName(), errs)
}
