package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-winkube-dev-v1alpha1-azureclustertemplate,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.winkube.dev,resources=azureclustertemplates,versions=v1alpha1,name=validation.azureclustertemplate.infrastructure.winkube.dev,admissionReviewVersions=v1

// AzureClusterTemplate validates cluster templates, whose spec is immutable.
type AzureClusterTemplate struct{}

// ValidateCreate checks the template's cluster spec.
func (AzureClusterTemplate) ValidateCreate(_ context.Context, t *infrav1.AzureClusterTemplate) (admission.Warnings, error) {
	return nil, invalid(t, validateClusterSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec")))
}

// ValidateUpdate refuses any change of the spec.
func (AzureClusterTemplate) ValidateUpdate(ctx context.Context, oldT, t *infrav1.AzureClusterTemplate) (admission.Warnings, error) {
	errs := validateClusterSpec(&t.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
	if !isTopologyDryRun(ctx, t) && !semanticEqual(oldT.Spec, t.Spec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "AzureClusterTemplate is immutable: create a new template and point the ClusterClass at it"))
	}
	return nil, invalid(t, errs)
}

// ValidateDelete allows deletion.
func (AzureClusterTemplate) ValidateDelete(context.Context, *infrav1.AzureClusterTemplate) (admission.Warnings, error) {
	return nil, nil
}

// +kubebuilder:webhook:verbs=create;update,path=/validate-winkube-cluster-x-k8s-io-v1beta2-cluster,mutating=false,failurePolicy=ignore,sideEffects=None,groups=cluster.x-k8s.io,resources=clusters,versions=v1beta2,name=winkube.cluster.cluster.x-k8s.io,admissionReviewVersions=v1

// Cluster checks a Cluster API Cluster that points at an AzureCluster: its
// pod and service ranges must stay off the VNet. Its failure policy is
// Ignore, since it guards another project's type; the AzureCluster webhook
// makes the same check when the AzureCluster comes second.
type Cluster struct {
	Reader client.Reader
}

func (w *Cluster) validate(ctx context.Context, c *clusterv1.Cluster) error {
	ref := c.Spec.InfrastructureRef
	if w.Reader == nil || ref.Kind != "AzureCluster" || ref.APIGroup != infrav1.GroupVersion.Group {
		return nil
	}
	ac := &infrav1.AzureCluster{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, ac); err != nil {
		return nil // the AzureCluster webhook checks when it is created
	}
	return invalid(c, clusterRangeErrors(c, ac.Spec.NetworkSpec.Vnet.CIDRBlocks))
}

// ValidateCreate checks the ranges.
func (w *Cluster) ValidateCreate(ctx context.Context, c *clusterv1.Cluster) (admission.Warnings, error) {
	return nil, w.validate(ctx, c)
}

// ValidateUpdate checks the ranges.
func (w *Cluster) ValidateUpdate(ctx context.Context, _, c *clusterv1.Cluster) (admission.Warnings, error) {
	return nil, w.validate(ctx, c)
}

// ValidateDelete allows deletion.
func (w *Cluster) ValidateDelete(context.Context, *clusterv1.Cluster) (admission.Warnings, error) {
	return nil, nil
}
